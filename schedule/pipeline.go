package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
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

	// Spool, Observer and ProgressInterval configure each backup.Pipeline
	// (nil and zero mean its defaults).
	Spool            *backup.Spool
	Observer         backup.Observer
	ProgressInterval time.Duration
	// Pins protects the backups a restore is reading from retention; nil
	// means none.
	Pins retention.Pins
	// Now returns the current time for backups and retention; nil means
	// time.Now.
	Now func() time.Time
	// Logger is given to the pipelines and pruners; nil means silent.
	Logger *slog.Logger
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

// Backup takes one backup of the job's cluster to all its destinations. A
// scheduled job's backup ID ends with the time of the backup; a one-shot
// job's is "<cluster>-<name>". It fails if any destination failed (the
// others keep their backup).
func (r *PipelineRunner) Backup(ctx context.Context, job Job, _ time.Time) error {
	if err := r.Validate(); err != nil {
		return err
	}
	targets := make([]backup.Target, 0, len(job.Destinations))
	for _, name := range job.Destinations {
		up, err := r.Uploader(ctx, name)
		if err != nil {
			return fmt.Errorf("destination %s: %w", name, err)
		}
		if ro, ok := up.(interface{ ReadOnly() bool }); ok && ro.ReadOnly() {
			return fmt.Errorf("destination %s: %w", name, storage.ErrReadOnly)
		}
		targets = append(targets, backup.Target{Destination: name, Uploader: up})
	}
	snap, err := r.Snapshotter(ctx, job.Cluster)
	if err != nil {
		return fmt.Errorf("snapshotter of cluster %s: %w", job.Cluster, err)
	}
	p := &backup.Pipeline{
		Snapshotter:      snap,
		Compression:      job.Compression,
		Encryption:       job.Encryption,
		Spool:            r.Spool,
		Observer:         r.Observer,
		Logger:           r.Logger,
		Now:              r.Now,
		ProgressInterval: r.ProgressInterval,
	}
	_, err = p.Run(ctx, backup.Request{Cluster: job.Cluster, Name: job.Name, Scheduled: !job.OneShot(), Targets: targets})
	return err
}

// Prune applies the job's retention policy to the cluster's folder on each
// of its destinations. It tries every destination and joins their errors.
func (r *PipelineRunner) Prune(ctx context.Context, job Job) error {
	if err := r.Validate(); err != nil {
		return err
	}
	var errs []error
	for _, name := range job.Destinations {
		store, err := r.Store(ctx, name)
		if err != nil {
			errs = append(errs, fmt.Errorf("destination %s: %w", name, err))
			continue
		}
		p := &retention.Pruner{Store: store, Destination: name, Policy: job.Retention, Name: job.Name, Pins: r.Pins, Now: r.Now, Logger: r.Logger}
		if _, err := p.Prune(ctx, job.Cluster); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CatalogInventory is the Inventory that lists a job's destinations: the
// job's last backup on a destination is its newest backup (with a
// manifest) of the job's cluster and backup name there. It reads every
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
			if e.Kind == backup.KindBackup && e.Manifest != nil && e.Manifest.Name == job.Name && e.Created.After(newest) {
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
