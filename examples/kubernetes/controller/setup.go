package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"filippo.io/age"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/replicate"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/schedule"
)

// Options configures Setup. Namespace is required; every other zero value
// works: the library's defaults, metrics on controller-runtime's registry,
// restores refused.
type Options struct {
	// Namespace is the controller's own namespace, the only one it reads
	// credentials Secrets from. Give the manager CacheOptions(Namespace)
	// so that its cache holds those Secrets and no other.
	Namespace string
	// Destinations configures the registry (check and poll intervals,
	// timeouts, part sizes). Its Secrets and Observer are Setup's own.
	Destinations destination.Options
	// MaxJitter spreads the ticks of jobs on the same schedule (see
	// schedule.Config).
	MaxJitter time.Duration
	// StopTimeout is the budget of a stopping scheduler
	// (schedule.Config.StopTimeout): it returns within it, its backups in
	// flight cancelled at three quarters of it; zero means
	// schedule.DefaultStopTimeout. Keep it below the manager's
	// GracefulShutdownTimeout: the manager releases its lease only after
	// the scheduler returned, so the next leader overlaps only what the
	// scheduler abandoned at the end of its budget (a backup or a last
	// segment still being stored, its cleanups ended), until this process
	// exits: nothing of it becomes visible without its manifest, as when
	// a process is killed (see schedule.Scheduler.Start).
	StopTimeout time.Duration
	// Identities decrypt encrypted backups for restores.
	Identities []age.Identity
	// RestoreDir is the directory restores create members' data
	// directories in (the volume they share with the etcd members). Empty
	// refuses every EtcdRestore.
	RestoreDir string
	// Registerer receives the library's collectors. Nil means
	// controller-runtime's metrics registry, served by the manager.
	Registerer prometheus.Registerer
	// Logger receives the library's logs; nil is silent.
	Logger *slog.Logger
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Controllers are the library's parts Setup created, for a host that wants
// to look at them (its own health checks, a drill).
type Controllers struct {
	Registry  *destination.Registry
	Scheduler *schedule.Scheduler
	// Pins holds the backups restores are reading: retention and
	// teardowns leave them alone.
	Pins *retention.PinSet

	probes probes
}

// Close closes the registry. Call it once the manager has stopped.
func (c *Controllers) Close() error { return c.Registry.Close() }

// AddToScheme adds the types the controllers use to a scheme: the
// backup.etcdbackup.io resources and the core Kubernetes ones.
func AddToScheme(s *runtime.Scheme) error {
	return errors.Join(clientgoscheme.AddToScheme(s), v1alpha1.AddToScheme(s))
}

// The RBAC the controllers need, generated into config/rbac by make
// generate: a ClusterRole that reads the resources and writes their
// status, updates EtcdClusters only (their finalizer) and patches
// EtcdRestores only (the digest of a published plan); a Role in the
// controller's namespace for the credentials Secrets and the leader's
// Lease. The markers name etcdbackup-system; kustomize's namespace
// (config/default, or an overlay) replaces it with the deployment's.
//
// +kubebuilder:rbac:groups=backup.etcdbackup.io,resources=backupdestinations;etcdclusters;etcdbackupconfigs;etcdbackups;etcdrestores,verbs=get;list;watch
// +kubebuilder:rbac:groups=backup.etcdbackup.io,resources=etcdclusters,verbs=update
// +kubebuilder:rbac:groups=backup.etcdbackup.io,resources=etcdrestores,verbs=patch
// +kubebuilder:rbac:groups=backup.etcdbackup.io,resources=backupdestinations/status;etcdclusters/status;etcdbackupconfigs/status;etcdbackups/status;etcdrestores/status,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",namespace=etcdbackup-system,resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=etcdbackup-system,resources=leases,verbs=get;list;watch;create;update;patch

// CacheOptions are the manager's cache options for a controller in
// namespace: Secrets are cached from that namespace only, so that neither
// the cache nor the RBAC it needs reach any other namespace's Secrets.
func CacheOptions(namespace string) cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Namespaces: map[string]cache.Config{namespace: {}}},
	}}
}

// Setup creates the registry and the scheduler and adds the controllers,
// the scheduler and the registry's checks to mgr. Everything runs on the
// elected leader only. The manager's scheme must hold AddToScheme's types.
func Setup(mgr manager.Manager, o Options) (*Controllers, error) {
	if o.Namespace == "" {
		return nil, errors.New("setup: Options.Namespace is required: the namespace credentials Secrets are read from")
	}
	c := mgr.GetClient()
	rec := mgr.GetEventRecorder("etcdbackup")
	now := o.Now
	if now == nil {
		now = time.Now
	}
	pins := &retention.PinSet{}
	loaded := newGate()
	// The credentials Secrets have a cache of their own: an informer of
	// the manager's cache that cannot sync (the Role of the controller's
	// namespace missing, or slow to list) holds back every controller's
	// start, and with it the Pending status of what waits for the
	// destinations. This one holds back the destinations controller only.
	secretOpts := CacheOptions(o.Namespace)
	secretOpts.Scheme, secretOpts.Mapper = mgr.GetScheme(), mgr.GetRESTMapper()
	secrets, err := cache.New(mgr.GetConfig(), secretOpts)
	if err != nil {
		return nil, fmt.Errorf("secrets cache: %w", err)
	}
	do := o.Destinations
	dests := &destinations{client: c, secrets: secrets, events: rec, changed: make(chan event.GenericEvent, 1),
		resync: cmp.Or(do.PollInterval, destination.DefaultPollInterval), namespace: o.Namespace, loaded: loaded}
	do.Secrets = &secretResolver{client: secrets, namespace: o.Namespace}
	do.Observer = destination.ObserverFunc(dests.observe)
	do.Logger = o.Logger
	registry, err := destination.NewRegistry(do)
	if err != nil {
		return nil, err
	}
	dests.registry = registry

	metrics := backup.NewMetrics()
	followMetrics := backup.NewFollowerMetrics()
	replicationMetrics := replicate.NewMetrics()
	configs := &configs{client: c, events: rec, registry: registry, metrics: metrics, ran: make(chan event.GenericEvent, 64), loaded: loaded}
	dests.configs = configs
	clusters := &clusters{client: c, events: rec, registry: registry, pins: pins, configs: configs, loaded: loaded, now: now}
	configs.clusters = clusters
	run := &runner{
		base: schedule.PipelineRunner{
			Snapshotter:    clusters.snapshotter,
			Uploader:       byName[backup.Uploader](registry),
			Store:          byName[retention.Store](registry),
			Pins:           pins,
			FollowObserver: followMetrics,
			// The replication lag and backups behind of each copy.
			ReplicationMetrics: replicationMetrics,
			Now:                now,
			Logger:             o.Logger,
		},
		metrics: metrics, configs: configs, events: rec,
	}
	scheduler, err := schedule.New(schedule.Config{
		Runner:      run,
		Inventory:   &schedule.CatalogInventory{Catalog: byName[backup.Catalog](registry)},
		MaxJitter:   o.MaxJitter,
		StopTimeout: o.StopTimeout,
		Logger:      o.Logger,
	})
	if err != nil {
		registry.Close()
		return nil, err
	}
	configs.scheduler = scheduler
	clusters.scheduler = scheduler

	reg := o.Registerer
	if reg == nil {
		reg = ctrlmetrics.Registry
	}
	for _, col := range []prometheus.Collector{metrics, followMetrics, replicationMetrics, registry.Collector(), scheduler.Collector()} {
		if err := reg.Register(col); err != nil {
			registry.Close()
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}

	drills := &drills{configs: configs, events: rec,
		restorer: &restore.Restorer{Identities: o.Identities, Pins: pins, Logger: o.Logger, Now: now}}
	configs.drills = drills
	oneShots := &oneShots{client: c, events: rec, registry: registry, clusters: clusters, metrics: metrics, now: now, log: o.Logger, loaded: loaded}
	restores := &restores{client: c, events: rec, registry: registry, pins: pins, dir: o.RestoreDir,
		identities: o.Identities, now: now, log: o.Logger, loaded: loaded, held: map[types.UID]heldPlan{}, clusters: clusters}
	// The scheduler and the registry's checks run on the leader only: the
	// manager runs runnables without NeedLeaderElection on the leader.
	schedulerPart := &tracked{name: "scheduler", run: scheduler.Start}
	checksPart := &tracked{name: "destinations' checks", run: registry.Run}
	err = errors.Join(
		indexFields(context.Background(), mgr.GetFieldIndexer(), o.Namespace),
		mgr.Add(secrets),
		dests.setup(mgr),
		configs.setup(mgr),
		clusters.setup(mgr),
		oneShots.setup(mgr),
		restores.setup(mgr),
		mgr.Add(checksPart),
		mgr.Add(schedulerPart),
		mgr.Add(drills),
	)
	if err != nil {
		registry.Close()
		return nil, err
	}
	return &Controllers{Registry: registry, Scheduler: scheduler, Pins: pins,
		probes: probes{elected: mgr.Elected(), loaded: loaded, parts: []*tracked{schedulerPart, checksPart}}}, nil
}

// Field indexes of the objects the controllers look up by reference.
const (
	indexCluster     = "spec.cluster"
	indexDestination = "spec.destination"
	indexSecret      = "spec.credentialsSecretRef"
)

func indexFields(ctx context.Context, fi client.FieldIndexer, namespace string) error {
	return errors.Join(
		fi.IndexField(ctx, &v1alpha1.EtcdBackupConfig{}, indexCluster, func(o client.Object) []string {
			return []string{o.(*v1alpha1.EtcdBackupConfig).Spec.Cluster}
		}),
		fi.IndexField(ctx, &v1alpha1.EtcdBackupConfig{}, indexDestination, func(o client.Object) []string {
			// The destinations of its copies too: a config is
			// revalidated when one of them comes, goes or changes.
			spec := o.(*v1alpha1.EtcdBackupConfig).Spec
			return append([]string{spec.Destination}, spec.ReplicateTo...)
		}),
		fi.IndexField(ctx, &v1alpha1.BackupDestination{}, indexSecret, func(o client.Object) []string {
			if ref := o.(*v1alpha1.BackupDestination).Spec.CredentialsSecretRef; ref != nil {
				return []string{cmp.Or(ref.Namespace, namespace) + "/" + ref.Name}
			}
			return nil
		}),
	)
}

// byName adapts Registry.Get to the lookups of the scheduler's runner and
// inventory, each of which wants an interface *destination.Destination
// implements.
func byName[T any](r *destination.Registry) func(context.Context, string) (T, error) {
	return func(_ context.Context, name string) (T, error) {
		d, err := r.Get(name)
		if err != nil {
			var zero T
			return zero, err
		}
		return any(d).(T), nil
	}
}

// recorder is the part of the manager's event recorder the controllers
// use.
type recorder = events.EventRecorder

// errNotLoaded is why a backup, a restore or a teardown waits: the
// destinations controller has not applied the BackupDestinations to the
// registry yet since the manager started (after a restart or a leader
// change), so an empty or partial registry says nothing.
var errNotLoaded = errors.New("the destinations are not loaded yet")

// gate opens once, when the destinations controller first applied the
// BackupDestinations. Nothing that reads the registry acts before.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// isOpen reports whether the gate opened.
func (g *gate) isOpen() bool {
	select {
	case <-g.ch:
		return true
	default:
		return false
	}
}
