package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/compact"
	"github.com/etcdbackup/etcdbackup/replicate"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// PipelineRunner is the Runner built on this library's own pieces: each
// Backup runs a backup.Pipeline with the job's compression and encryption
// to every destination of the job, and each Prune runs a retention.Pruner
// with the job's policy on every destination. The host plugs in its
// clusters and its destinations through three functions, for instance
// with a destination registry:
//
//	Uploader: func(ctx context.Context, name string) (backup.Uploader, error) { return registry.Get(name) },
//	Store:    func(ctx context.Context, name string) (retention.Store, error) { return registry.Get(name) },
//
// Retention works on a cluster's folder of a destination: jobs that back up
// the same cluster to the same destination share it, and should share a
// policy too.
type PipelineRunner struct {
	// Snapshotter returns the snapshotter of a cluster's etcd. Required.
	Snapshotter func(ctx context.Context, cluster string) (backup.Snapshotter, error)
	// Uploader returns the uploader of a destination by name. Required.
	// An uploader with a ReadOnly() bool method that returns true is
	// refused before the snapshot is taken, with storage.ErrReadOnly.
	Uploader func(ctx context.Context, destination string) (backup.Uploader, error)
	// Store returns the store of a destination by name, for retention.
	// Required.
	Store func(ctx context.Context, destination string) (retention.Store, error)

	// Client returns a client of a cluster's etcd, for logical (keys-json
	// and keys) jobs and continuous backups; the runner closes it when the
	// run ends. Nil means the Snapshotter's own Client method
	// (backup.EtcdSnapshotter has one).
	Client func(ctx context.Context, cluster string) (*clientv3.Client, error)

	// Spool, Observer, ProgressInterval and StallTimeout configure each
	// backup.Pipeline (nil and zero mean its defaults); StallTimeout also
	// bounds each transfer of a replication job (replicate.Copier).
	Spool            *backup.Spool
	Observer         backup.Observer
	ProgressInterval time.Duration
	StallTimeout     time.Duration
	// FollowObserver receives the events of the continuous backups; nil
	// means none (see backup.FollowMetrics).
	FollowObserver backup.FollowObserver
	// ReplicationObserver receives the events of replication jobs' copies,
	// and ReplicationMetrics records their reports; nil means none.
	ReplicationObserver replicate.Observer
	ReplicationMetrics  *replicate.Metrics
	// Pins protects the backups a restore is reading from retention; nil
	// means none.
	Pins retention.Pins
	// RetentionMetrics records every prune's report (entries skipped,
	// backups misdated); nil means none.
	RetentionMetrics *retention.Metrics
	// Now returns the current time for backups and retention; nil means
	// time.Now.
	Now func() time.Time
	// Logger is given to the pipelines and pruners; nil means silent.
	Logger *slog.Logger
	// Restorer reads, replays and drills the chains of continuous jobs
	// that compact (Continuous.CompactInterval): its Identities must open
	// the jobs' encrypted backups, and its TempDir holds a database as
	// large as the cluster's. Nil means one without identities, in the
	// system's temporary directory.
	Restorer *restore.Restorer
}

var _ Runner = (*PipelineRunner)(nil)

// Validate reports a missing function.
func (r *PipelineRunner) Validate() error {
	var errs []error
	if r.Snapshotter == nil {
		errs = append(errs, errors.New("pipeline runner has no Snapshotter"))
	}
	if r.Uploader == nil {
		errs = append(errs, errors.New("pipeline runner has no Uploader"))
	}
	if r.Store == nil {
		errs = append(errs, errors.New("pipeline runner has no Store"))
	}
	return errors.Join(errs...)
}

// Backup takes one backup of the job's cluster to all its destinations:
// an etcd snapshot, or for a keys-json or keys job the keys under its
// prefixes at one revision. A scheduled job's backup ID ends with the time of the
// backup; a one-shot job's is "<cluster>-<name>". It fails if any
// destination failed (the others keep their backup).
func (r *PipelineRunner) Backup(ctx context.Context, job Job, _ time.Time) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if job.Replicate != nil {
		return r.replicate(ctx, job)
	}
	targets, err := r.targets(ctx, job)
	if err != nil {
		return err
	}
	snap, err := r.Snapshotter(ctx, job.Cluster)
	if err != nil {
		return fmt.Errorf("snapshotter of cluster %s: %w", job.Cluster, err)
	}
	req := backup.Request{Cluster: job.Cluster, Name: job.Name, Scheduled: !job.OneShot(), Targets: targets, Job: job.ID}
	if kind := job.backupKind(); kind.Logical() {
		cli, err := r.client(ctx, job.Cluster, snap)
		if err != nil {
			return err
		}
		defer cli.Close()
		req.Kind = backup.ManifestKindKeysJSON
		if kind == backup.KindKeys {
			req.Kind = backup.ManifestKindKeys
		}
		snap = &backup.KeysExporter{Client: cli, Prefixes: job.Prefixes, Kind: req.Kind, Now: r.Now}
	}
	_, err = r.pipeline(snap, job).Run(ctx, req)
	return err
}

// targets returns the uploaders of the job's destinations, refusing a
// read-only one.
func (r *PipelineRunner) targets(ctx context.Context, job Job) ([]backup.Target, error) {
	targets := make([]backup.Target, 0, len(job.Destinations))
	for _, name := range job.Destinations {
		up, err := r.Uploader(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("destination %s: %w", name, err)
		}
		if ro, ok := up.(interface{ ReadOnly() bool }); ok && ro.ReadOnly() {
			return nil, fmt.Errorf("destination %s: %w", name, storage.ErrReadOnly)
		}
		targets = append(targets, backup.Target{Destination: name, Uploader: up})
	}
	return targets, nil
}

func (r *PipelineRunner) pipeline(snap backup.Snapshotter, job Job) *backup.Pipeline {
	return &backup.Pipeline{
		Snapshotter:      snap,
		Compression:      job.Compression,
		Encryption:       job.Encryption,
		Spool:            r.Spool,
		Observer:         r.Observer,
		Logger:           r.Logger,
		Now:              r.Now,
		ProgressInterval: r.ProgressInterval,
		StallTimeout:     r.StallTimeout,
	}
}

// client returns a client of the cluster's etcd: from Client, or from the
// snapshotter.
func (r *PipelineRunner) client(ctx context.Context, cluster string, snap backup.Snapshotter) (*clientv3.Client, error) {
	var (
		cli *clientv3.Client
		err error
	)
	switch src, ok := snap.(interface {
		Client(context.Context) (*clientv3.Client, error)
	}); {
	case r.Client != nil:
		cli, err = r.Client(ctx, cluster)
	case ok:
		cli, err = src.Client(ctx)
	default:
		return nil, fmt.Errorf("cluster %s: no etcd client: the runner has no Client and the snapshotter gives none", cluster)
	}
	if err != nil {
		return nil, fmt.Errorf("etcd client of cluster %s: %w", cluster, err)
	}
	return cli, nil
}

// Prune applies the job's retention policy to the cluster's folder on each
// of its destinations. It tries every destination and joins their errors.
func (r *PipelineRunner) Prune(ctx context.Context, job Job) error {
	if err := r.Validate(); err != nil {
		return err
	}
	// A replication job's retention counts each kind of copy apart, as
	// its selection does (replicate.Kinds).
	kinds := []backup.Kind{job.backupKind()}
	if job.Replicate != nil {
		kinds = replicate.Kinds()
	}
	var errs []error
	for _, name := range job.Destinations {
		store, err := r.Store(ctx, name)
		if err != nil {
			errs = append(errs, fmt.Errorf("destination %s: %w", name, err))
			continue
		}
		for _, kind := range kinds {
			if _, err := r.pruner(job, name, store, kind).Prune(ctx, job.Cluster); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// pruner returns the Pruner of job's retention of backups of kind on the
// destination name.
func (r *PipelineRunner) pruner(job Job, name string, store retention.Store, kind backup.Kind) *retention.Pruner {
	p := &retention.Pruner{Store: store, Destination: name, Policy: job.Retention, Name: job.pruneName(), Scope: job.pruneScope(),
		Kind: kind, Pins: r.Pins, Metrics: r.RetentionMetrics, Now: r.Now, Logger: r.Logger}
	if job.Replicate != nil {
		// Copies are written any time after their backups: their dates
		// are checked against the source's store's time they record.
		p.Copies = replicate.IsCopy
	}
	if c := job.Continuous; c != nil {
		chains := retention.PointInTime(c.Window)
		chains.Others = job.continuousPeers
		p.Chains = &chains
	}
	if rp := job.Replicate; rp != nil {
		// The rule its selection copies by: chains whole while needed.
		chains := replicate.ChainRule(rp.PointInTime)
		p.Chains = &chains
	}
	return p
}

// CatalogInventory is the Inventory that lists a job's destinations: the
// job's last backup on a destination is its newest backup (with a
// manifest) of the job's cluster and backup name there (for a replication
// job, its newest copy of any name, replicate.IsCopy: its copies keep
// their source's names, and what other jobs wrote there is not its work,
// so a one-shot copy to a target that holds backups still runs). It reads every
// manifest of the cluster's folder on each destination; a host with
// thousands of jobs answers from a synced inventory instead.
type CatalogInventory struct {
	// Catalog returns the catalog of a destination by name. Required.
	Catalog func(ctx context.Context, destination string) (backup.Catalog, error)
}

var _ Inventory = (*CatalogInventory)(nil)

// LastBackup returns the oldest of the job's newest backups on each of its
// destinations, and false when a destination has none.
func (c *CatalogInventory) LastBackup(ctx context.Context, job Job) (time.Time, bool, error) {
	if c.Catalog == nil {
		return time.Time{}, false, errors.New("catalog inventory has no Catalog")
	}
	var oldest time.Time
	for _, name := range job.Destinations {
		cat, err := c.Catalog(ctx, name)
		if err != nil {
			return time.Time{}, false, fmt.Errorf("destination %s: %w", name, err)
		}
		entries, err := backup.ListBackups(ctx, cat, job.Cluster)
		if err != nil {
			return time.Time{}, false, fmt.Errorf("destination %s: %w", name, err)
		}
		var newest time.Time
		for _, e := range entries {
			if e.Kind == job.backupKind() && job.owns(e.Manifest) && e.Created.After(newest) {
				newest = e.Created
			}
		}
		if newest.IsZero() {
			return time.Time{}, false, nil
		}
		if oldest.IsZero() || newest.Before(oldest) {
			oldest = newest
		}
	}
	return oldest, !oldest.IsZero(), nil
}

var (
	_ ContinuousRunner = (*PipelineRunner)(nil)
	_ CompactingRunner = (*PipelineRunner)(nil)
)

// Follow runs a backup.Follower for the job's cluster and destinations
// until ctx ends: its chains start from the job's full backups (the
// follower takes one when a destination has none it can resume from), and
// its segments are encoded as the job's backups are.
func (r *PipelineRunner) Follow(ctx context.Context, job Job, started func()) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if job.Continuous == nil {
		return fmt.Errorf("job %s is not continuous", quoteID(job.ID))
	}
	targets, err := r.targets(ctx, job)
	if err != nil {
		return err
	}
	catalogs := make([]backup.Catalog, 0, len(job.Destinations))
	for _, name := range job.Destinations {
		store, err := r.Store(ctx, name)
		if err != nil {
			return fmt.Errorf("destination %s: %w", name, err)
		}
		catalogs = append(catalogs, store)
	}
	snap, err := r.Snapshotter(ctx, job.Cluster)
	if err != nil {
		return fmt.Errorf("snapshotter of cluster %s: %w", job.Cluster, err)
	}
	cli, err := r.client(ctx, job.Cluster, snap)
	if err != nil {
		return err
	}
	defer cli.Close()
	f := &backup.Follower{
		Client:        cli,
		Pipeline:      r.pipeline(snap, job),
		Cluster:       job.Cluster,
		Targets:       targets,
		Catalogs:      catalogs,
		FullName:      job.Name,
		FlushInterval: job.Continuous.FlushInterval,
		Observer:      startedObserver{started: started, next: r.FollowObserver},
	}
	return f.Run(ctx)
}

// Compact implements CompactingRunner: it compacts the job's chain, read
// from all its destinations, into a synthetic full backup at its last
// committed revision, named and encoded as the job's full backups and
// stored on every destination (see compact.Compactor).
func (r *PipelineRunner) Compact(ctx context.Context, job Job) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if job.Continuous == nil {
		return fmt.Errorf("job %s is not continuous", quoteID(job.ID))
	}
	targets, err := r.targets(ctx, job)
	if err != nil {
		return err
	}
	var sources []restore.Source
	var into []compact.Target
	for i, name := range job.Destinations {
		store, err := r.Store(ctx, name)
		if err != nil {
			return fmt.Errorf("destination %s: %w", name, err)
		}
		sources = append(sources, restore.Source{Name: name, Catalog: store})
		into = append(into, compact.Target{Target: targets[i], Catalog: store})
	}
	rs := r.Restorer
	if rs == nil {
		rs = &restore.Restorer{Logger: r.Logger}
	}
	c := &compact.Compactor{Restorer: rs, Pipeline: r.pipeline(nil, job), Logger: r.Logger}
	_, err = c.Compact(ctx, compact.Request{Cluster: job.Cluster, Name: job.Name, Job: job.ID, Sources: sources, Targets: into})
	return err
}

// LastCompaction returns when the newest synthetic full backup of job's
// name was created on one of its destinations, the zero time when none
// holds one.
func (r *PipelineRunner) LastCompaction(ctx context.Context, job Job) (time.Time, error) {
	var last time.Time
	for _, name := range job.Destinations {
		store, err := r.Store(ctx, name)
		if err != nil {
			return time.Time{}, fmt.Errorf("destination %s: %w", name, err)
		}
		entries, err := backup.ListBackups(ctx, store, job.Cluster)
		if err != nil {
			return time.Time{}, fmt.Errorf("list backups on %s: %w", name, err)
		}
		for _, e := range entries {
			if e.Kind == backup.KindBackup && e.Manifest != nil && e.Manifest.IsSynthetic() && e.Manifest.Name == job.Name && e.Created.After(last) {
				last = e.Created
			}
		}
	}
	return last, nil
}
