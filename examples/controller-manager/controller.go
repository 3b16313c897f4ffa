package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/schedule"
)

// controller reconciles the destination registry and the scheduler to the
// config file, as a controller-manager reconciles them to its Seed and
// EtcdBackupConfig objects.
type controller struct {
	path      string
	registry  *destination.Registry
	scheduler *schedule.Scheduler
	pins      retention.PinSet // the backups drills read: retention leaves them alone
	state     *state           // the destinations configs are bound to, across restarts
	log       *slog.Logger

	// Only the reconcile loop touches these.
	hash    [sha256.Size]byte
	applied map[string]destination.BackupConfig // by job ID: the config each job was set from

	mu      sync.Mutex
	configs map[string]string            // job ID -> destination named in the file, of the configs being applied
	etcd    map[string]backup.EtcdConfig // by cluster, for the snapshotters
	drilled []drillTarget                // what the drills prove restorable
	lastErr error                        // of the last reconcile
	// known names a job's cluster and destinations to the backup metrics
	// when it is set; nil means nothing to tell.
	known func(cluster string, destinations ...string)
}

// drillTarget is a cluster's folder on a destination.
type drillTarget struct{ cluster, destination string }

func newController(path string, registry *destination.Registry, st *state, log *slog.Logger) *controller {
	return &controller{path: path, registry: registry, state: st, log: log,
		applied: map[string]destination.BackupConfig{}, etcd: map[string]backup.EtcdConfig{}}
}

// users names the backup configs of the file being applied that use the
// destination dest: bound to it, or naming it. The registry refuses to
// remove or move such a destination (destination.Options.Users).
func (c *controller) users(dest string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for id, named := range c.configs {
		if bound := c.state.binding(id); bound == dest || bound == "" && named == dest {
			out = append(out, id)
		}
	}
	return out
}

// watch reconciles whenever the file's content changes, until ctx ends.
// Polling its hash works wherever the file comes from (a ConfigMap mount
// swaps a symlink, an editor writes a new inode), where watching inodes
// would not.
func (c *controller) watch(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	logged := "" // an unreadable file is logged once, not at every poll
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			err := c.reconcile(ctx)
			if err != nil && err.Error() != logged {
				c.log.Error("reconcile", "config", c.path, "err", err)
			}
			if logged = ""; err != nil {
				logged = err.Error()
			}
		}
	}
}

// reconcile applies the file if its content changed since the last time.
// A file that cannot be read, parsed or applied changes nothing: the last
// good configuration keeps running. A backup config that is refused keeps
// its job as it was, while the others are applied.
func (c *controller) reconcile(ctx context.Context) error {
	raw, err := os.ReadFile(c.path)
	if err != nil {
		return c.done(fmt.Errorf("read config: %w", err))
	}
	sum := sha256.Sum256(raw)
	if sum == c.hash {
		return nil
	}
	c.hash = sum
	return c.done(c.apply(ctx, raw))
}

func (c *controller) done(err error) error {
	c.mu.Lock()
	c.lastErr = err
	c.mu.Unlock()
	return err
}

func (c *controller) apply(ctx context.Context, raw []byte) error {
	cfg, err := parseConfig(raw)
	if err != nil {
		return fmt.Errorf("config %s: %w", c.path, err)
	}
	desired, err := cfg.desired()
	if err != nil {
		return fmt.Errorf("destinations: %w", err)
	}
	configs := map[string]string{}
	for _, bc := range cfg.BackupConfigs {
		configs[bc.id()] = bc.Destination
	}
	c.mu.Lock()
	c.configs = configs
	c.mu.Unlock()
	changes, err := c.registry.Apply(ctx, desired)
	if err != nil {
		return fmt.Errorf("destinations: %w", err)
	}
	if !changes.Empty() {
		c.log.Info("destinations reconciled", "added", changes.Added, "updated", changes.Updated,
			"removed", changes.Removed, "default", changes.Default)
	}

	var errs []error
	c.mu.Lock()
	etcd := c.etcd
	c.mu.Unlock()
	nextEtcd := map[string]backup.EtcdConfig{}
	seen := map[string]bool{}
	for _, bc := range cfg.BackupConfigs {
		id := bc.id()
		seen[id] = true
		if err := c.setJob(ctx, bc, nextEtcd); err != nil {
			errs = append(errs, fmt.Errorf("backup config %s: %w", id, err))
			if _, ok := c.applied[id]; ok {
				nextEtcd[bc.Cluster] = etcd[bc.Cluster] // its job keeps running as it was
			}
		}
	}
	c.mu.Lock()
	c.etcd = nextEtcd
	c.mu.Unlock()

	for id := range c.applied {
		if seen[id] {
			continue
		}
		// Remove waits until a run in flight has been cancelled: after it,
		// nothing of the job runs any more.
		if err := c.scheduler.Remove(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("remove backup config %s: %w", id, err))
			continue
		}
		delete(c.applied, id)
		if err := c.state.forget(id); err != nil {
			errs = append(errs, err)
		}
		c.log.Info("backup config removed", "id", id)
	}

	targets := map[drillTarget]bool{}
	for _, bc := range c.applied {
		targets[drillTarget{bc.Cluster, bc.Destination}] = true
	}
	c.mu.Lock()
	c.drilled = slices.SortedFunc(maps.Keys(targets), func(a, b drillTarget) int {
		return cmp.Or(cmp.Compare(a.cluster, b.cluster), cmp.Compare(a.destination, b.destination))
	})
	c.mu.Unlock()
	return errors.Join(errs...)
}

// setJob validates one backup config against the registry and the config
// it replaces, binds it to its destination for good, and sets its job.
func (c *controller) setJob(ctx context.Context, bc backupConfig, etcd map[string]backup.EtcdConfig) error {
	cfg := bc.libraryConfig()
	var existing *destination.BackupConfig
	if prev, ok := c.applied[bc.id()]; ok {
		existing = &prev
	} else if bound := c.state.binding(bc.id()); bound != "" {
		// Accepted before a restart: bound to the destination of then,
		// whatever the default is now.
		prev := cfg
		prev.Destination = bound
		existing = &prev
	}
	if cfg.Destination == "" && existing != nil {
		cfg.Destination = existing.Destination
	}
	// The destination of an existing config may not change: its backups
	// live on the old one (destination.ErrDestinationChanged).
	valid, err := c.registry.ValidateBackupConfig(cfg, existing)
	if err != nil {
		return err
	}
	ec := bc.etcd()
	if err := errors.Join(ec.Validate(), bc.checkKind()); err != nil {
		return err
	}
	if other, ok := etcd[bc.Cluster]; ok && strings.Join(other.Endpoints, ",") != strings.Join(ec.Endpoints, ",") {
		return fmt.Errorf("cluster %s has other endpoints in another backup config", bc.Cluster)
	}
	if err := c.state.bind(bc.id(), valid.Destination); err != nil {
		return err
	}
	etcd[bc.Cluster] = ec
	if done, err := c.oneShotTaken(ctx, valid); err != nil || done {
		if err == nil {
			c.applied[bc.id()] = valid
		}
		return err
	}
	job := bc.job(valid)
	if err := c.scheduler.Set(job); err != nil {
		return err
	}
	if c.known != nil {
		c.known(job.Cluster, job.Destinations...) // failure counters at zero before the first run
	}
	if existing == nil || *existing != valid {
		c.log.Info("backup config set", "id", bc.id(), "destination", valid.Destination, "schedule", valid.Schedule, "keep", valid.Keep)
	}
	c.applied[bc.id()] = valid
	return nil
}

// oneShotTaken reports whether valid is a one-shot config whose backup
// exists already, taken before a restart: it is done, and not run again.
func (c *controller) oneShotTaken(ctx context.Context, valid destination.BackupConfig) (bool, error) {
	if valid.Schedule != "" {
		return false, nil
	}
	if _, ok := c.applied[valid.Cluster+"/"+valid.Name]; ok {
		return false, nil // set in this run: the scheduler knows it ran
	}
	d, err := c.registry.Get(valid.Destination)
	if err != nil {
		return false, err
	}
	done, err := oneShotDone(ctx, d, valid.Cluster, valid.Name)
	if done {
		c.log.Info("one-shot backup taken before, not run again", "id", valid.Cluster+"/"+valid.Name, "destination", valid.Destination)
	}
	return done, err
}

// snapshotter returns the snapshotter of a cluster's etcd, for the
// scheduler's runner. Creating one does not connect.
func (c *controller) snapshotter(_ context.Context, cluster string) (backup.Snapshotter, error) {
	c.mu.Lock()
	cfg, ok := c.etcd[cluster]
	c.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("no etcd endpoints for cluster %s", cluster)
	}
	return backup.NewEtcdSnapshotter(cfg)
}

// drills proves, at every interval, that the newest backup of each
// cluster on each of its destinations restores, and records the results
// in metrics: a backup nobody restored is a hope, not a backup. The backup
// being drilled is pinned, so that retention does not delete it meanwhile.
// A target on which no backup was ever found gets no verdict until its
// first backup lands; once one was found, finding none is a failure.
func (c *controller) drills(ctx context.Context, every time.Duration, r *restore.Restorer, metrics *restore.DrillMetrics) {
	t := time.NewTicker(every)
	defer t.Stop()
	found := make(map[drillTarget]bool) // targets a drill found a backup on
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		targets := c.drilled
		c.mu.Unlock()
		for _, tg := range targets {
			d, err := c.registry.Get(tg.destination)
			if err != nil {
				continue // removed meanwhile
			}
			verdict := false
			sources := []restore.Source{{Name: d.Name(), Catalog: d}}
			err = r.DrillJob(sources, restore.Query{Cluster: tg.cluster}, func(ctx context.Context, res *restore.DrillResult) {
				if res.ID != "" {
					found[tg] = true
				}
				switch {
				case ctx.Err() != nil: // cut short by the shutdown: no verdict on the backup
				case errors.Is(res.Err, restore.ErrNoBackup) && !found[tg]: // nothing backed up yet
				default:
					verdict = true
					metrics.Record(ctx, res)
				}
			})(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil && verdict {
				c.log.Warn("restore drill failed", "cluster", tg.cluster, "destination", tg.destination, "err", err)
			}
		}
	}
}

// healthz says the process serves; readyz that its configuration is
// applied, or why not.
func (c *controller) healthz(w http.ResponseWriter, _ *http.Request) {
	fmt.Fprintln(w, "ok")
}

func (c *controller) readyz(w http.ResponseWriter, _ *http.Request) {
	c.mu.Lock()
	err := c.lastErr
	c.mu.Unlock()
	if err != nil {
		http.Error(w, strings.ReplaceAll(err.Error(), "\n", "; "), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
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

// mountedSecrets resolves the credentials of destinations whose source is
// "secret" from Secrets mounted under dir: the secret "ns/name" is the
// directory dir/ns/name holding the files accessKeyID and secretAccessKey.
// A controller-manager with a Kubernetes client reads the Secret object
// instead, and sets the destination's Credentials.Revision to its
// resourceVersion so that a rotation reaches the registry.
func mountedSecrets(dir string) destination.SecretResolver {
	return destination.SecretResolverFunc(func(_ context.Context, _, secret string) (*credentials.Credentials, error) {
		if dir == "" {
			return nil, errors.New("no --secrets-dir to read secrets from")
		}
		if !filepath.IsLocal(secret) {
			return nil, fmt.Errorf("secret name %q is not a relative path", secret)
		}
		var keys destination.Keys
		for _, f := range []struct {
			name string
			into *string
		}{{"accessKeyID", &keys.AccessKey}, {"secretAccessKey", &keys.SecretKey}} {
			b, err := os.ReadFile(filepath.Join(dir, secret, f.name))
			if err != nil {
				var pe *os.PathError
				if errors.As(err, &pe) {
					err = pe.Err // the path again adds nothing
				}
				return nil, fmt.Errorf("secret %s: %s: %w", secret, f.name, err)
			}
			if *f.into = strings.TrimSpace(string(b)); *f.into == "" {
				return nil, fmt.Errorf("secret %s: %s is empty", secret, f.name)
			}
		}
		return keys.Credentials(), nil
	})
}
