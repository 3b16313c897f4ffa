// Command controller-manager shows how a seed's controller-manager embeds
// etcdbackup: it reads a seed-like YAML file (backup destinations with
// references to their credentials, a default, the deprecated single-bucket
// fields, and backup configs with cluster, etcd endpoints, schedule and
// keep), and runs
//
//	destination.Registry  the named destinations, their availability and inventory
//	schedule.Scheduler    one job per backup config: backup, then retention
//	restore.Restorer      a daily drill: the newest backups restore (Restorer.Drill)
//	/metrics              backup.Metrics, the registry's, the scheduler's and the drills' collectors
//	/healthz, /readyz     alive; configuration applied (or why not)
//
// It reconciles both to the file whenever the file changes (Registry.Apply,
// Scheduler.Set and Remove), the way a controller reconciles them to its
// objects, and on SIGTERM lets the backups in flight finish before it
// exits. Run it with the example configuration beside this file and an
// etcd on 127.0.0.1:2379, then edit the file and watch it reconcile:
//
//	mkdir -p /tmp/etcdbackup/main /tmp/etcdbackup/offsite
//	go run ./examples/controller-manager --config=examples/controller-manager/seed.yaml --listen=127.0.0.1:8080
//	curl -s 127.0.0.1:8080/metrics | grep ^etcdbackup_
//	curl -s 127.0.0.1:8080/readyz
//
// A real controller-manager replaces the file with its Seed and
// EtcdBackupConfig objects, the mounted secrets with a Kubernetes client
// (mountedSecrets), and adds the scheduler as a runnable of its elected
// leader (Scheduler.NeedLeaderElection) or gives it a schedule.EtcdLock.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"filippo.io/age"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/schedule"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/azure"
	"github.com/etcdbackup/etcdbackup/storage/blob/gcs"
)

// options are the flags of the command.
type options struct {
	config     string
	listen     string
	secretsDir string
	poll       time.Duration
	drillEvery time.Duration
	identities []age.Identity
	logger     *slog.Logger
	// listening, when set, is told the address /metrics is served on.
	listening func(net.Addr)
}

func main() {
	o := options{logger: slog.New(slog.NewJSONHandler(os.Stderr, nil))}
	flag.StringVar(&o.config, "config", "", "seed configuration `file` (required)")
	flag.StringVar(&o.listen, "listen", ":8080", "`address` of /metrics, /healthz and /readyz")
	flag.StringVar(&o.secretsDir, "secrets-dir", "", "`directory` of mounted secrets, for destinations whose credentials source is secret")
	flag.DurationVar(&o.poll, "poll", 5*time.Second, "how often to look for a change of the config file")
	flag.DurationVar(&o.drillEvery, "drill-every", 24*time.Hour, "how often to prove the newest backups restorable (0: never)")
	identityFile := flag.String("identity-file", "", "age identities `file`, for drills of encrypted backups")
	flag.Parse()
	if o.config == "" || flag.NArg() > 0 || o.poll <= 0 || o.drillEvery < 0 {
		flag.Usage()
		os.Exit(2)
	}
	if *identityFile != "" {
		var err error
		if o.identities, err = readIdentities(*identityFile); err != nil {
			o.logger.Error("identity file", "err", err)
			os.Exit(2)
		}
	}
	if err := run(context.Background(), o); err != nil {
		o.logger.Error("controller-manager stopped", "err", err)
		os.Exit(1)
	}
}

// run runs the controller-manager until ctx ends or SIGTERM (or SIGINT)
// comes, then stops every part and returns nil.
func run(ctx context.Context, o options) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := o.logger

	// The destinations. The registry is the host's value: nothing global.
	st, err := loadState(o.config + ".state.json")
	if err != nil {
		return err
	}
	var c *controller
	registry, err := destination.NewRegistry(destination.Options{
		// The clouds' drivers are linked where they are named: a host
		// that writes to one cloud passes its driver alone.
		Drivers: []blob.Driver{gcs.Driver(), azure.Driver()},
		Secrets: mountedSecrets(o.secretsDir),
		// The operator writes the configuration file: any credential
		// file, variable or IAM endpoint it names is its own.
		CredentialSources: destination.AnySource(),
		Logger:            log,
		// The registry refuses to remove or move a destination that
		// backup configs use.
		Users: func(dest string) []string { return c.users(dest) },
	})
	if err != nil {
		return err
	}
	defer registry.Close()

	// The scheduler runs each job through the library's own pipeline and
	// retention, on the registry's destinations; the inventory lets a
	// restarted controller catch up on ticks it missed.
	metrics, followMetrics, retentionMetrics := backup.NewMetrics(), backup.NewFollowerMetrics(), retention.NewMetrics()
	c = newController(o.config, registry, st, log)
	c.known = metrics.Known
	c.scheduler, err = schedule.New(schedule.Config{
		Runner: &schedule.PipelineRunner{
			Snapshotter:      c.snapshotter,
			Uploader:         byName[backup.Uploader](registry),
			Store:            byName[retention.Store](registry),
			Observer:         metrics,
			FollowObserver:   followMetrics,
			RetentionMetrics: retentionMetrics,
			Pins:             &c.pins,
			Logger:           log,
			// Compactions read and drill the chains with the drills'
			// identities.
			Restorer: &restore.Restorer{Identities: o.identities, Logger: log, Pins: &c.pins},
		},
		Inventory: &schedule.CatalogInventory{Catalog: byName[backup.Catalog](registry)},
		Logger:    log,
	})
	if err != nil {
		return err
	}
	// A configuration that cannot be applied at start is an error; later,
	// a bad change is reported by /readyz and the last good one runs on.
	if err := c.reconcile(ctx); err != nil {
		return err
	}

	// Metrics on the host's own Prometheus registry.
	drillMetrics := restore.NewDrillMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics, followMetrics, retentionMetrics, registry.Collector(), c.scheduler.Collector(), drillMetrics,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", c.healthz)
	mux.HandleFunc("GET /readyz", c.readyz)
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	// Every part runs until ctx ends; a part that fails stops the others.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu     sync.Mutex
		failed error
	)
	fail := func(err error) {
		mu.Lock()
		failed = errors.Join(failed, err)
		mu.Unlock()
		cancel()
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			fail(fmt.Errorf("serve: %w", err))
		}
	}()
	var parts sync.WaitGroup
	parts.Go(func() { _ = registry.Run(ctx) })
	parts.Go(func() {
		if err := c.scheduler.Start(ctx); err != nil {
			fail(fmt.Errorf("scheduler: %w", err))
		}
	})
	parts.Go(func() { c.watch(ctx, o.poll) })
	if o.drillEvery > 0 {
		restorer := &restore.Restorer{Identities: o.identities, Logger: log, Pins: &c.pins}
		parts.Go(func() { c.drills(ctx, o.drillEvery, restorer, drillMetrics) })
	}
	log.Info("controller-manager started", "config", o.config, "listen", ln.Addr().String())
	if o.listening != nil {
		o.listening(ln.Addr())
	}

	<-ctx.Done()
	// The scheduler's Start returns once the backups in flight have
	// finished, or were cancelled after its StopTimeout; /metrics is
	// served until then.
	log.Info("stopping: waiting for the backups in flight")
	parts.Wait()
	shutdown, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	if err := srv.Shutdown(shutdown); err != nil {
		srv.Close()
	}
	<-served
	if failed != nil {
		return failed
	}
	log.Info("controller-manager stopped")
	return nil
}

// readIdentities reads an age identities file. Its errors never quote the
// file's content.
func readIdentities(path string) ([]age.Identity, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ids, err := age.ParseIdentities(f)
	if err != nil {
		return nil, fmt.Errorf("%s holds no valid age identity", path)
	}
	return ids, nil
}
