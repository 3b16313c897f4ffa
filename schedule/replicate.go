package schedule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/replicate"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
)

// replicate runs one run of a replication job: a copy of the cluster's
// backups from the job's source to each of its destinations, as stored.
// Every target is tried; their errors are joined.
func (r *PipelineRunner) replicate(ctx context.Context, job Job) error {
	src, err := r.Store(ctx, job.Replicate.From)
	if err != nil {
		for _, name := range job.Destinations {
			r.recordFailure(ctx, job, name)
		}
		return fmt.Errorf("replication source %s: %w", job.Replicate.From, err)
	}
	sel := replicate.Selection{All: true}
	if w := job.Replicate.Window; w > 0 {
		sel = replicate.Selection{Since: r.now().Add(-w)}
	}
	sel.Name = job.Replicate.Name
	if !job.OneShot() {
		// Copy only what the job's retention keeps of the copies: never
		// again what its last prune deleted.
		policy := job.Retention
		sel.Retention = &policy
		if w := job.Replicate.PointInTime; w > 0 {
			chains := retention.PointInTime(w)
			sel.PointInTime = &chains
		}
	}
	var errs []error
	for _, name := range job.Destinations {
		target, err := r.replicationTarget(ctx, name)
		if err != nil {
			r.recordFailure(ctx, job, name)
			errs = append(errs, err)
			continue
		}
		c := &replicate.Copier{Source: src, SourceName: job.Replicate.From, Target: target,
			Observer: r.ReplicationObserver, Logger: r.Logger, Now: r.Now, StallTimeout: r.StallTimeout}
		rep, err := c.Copy(ctx, job.Cluster, sel)
		if rep != nil {
			r.ReplicationMetrics.Record(rep, r.now())
		} else if err != nil {
			// Failed before it could tell what the target lacks (the
			// source's listing failed): a failure, and the lag grows.
			r.recordFailure(ctx, job, name)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("replicate %s to %s: %w", job.Replicate.From, name, err))
		}
	}
	return errors.Join(errs...)
}

// recordFailure records a copy of job to target that failed before it
// made a report (replicate.Metrics.RecordFailure), unless ctx was
// cancelled for another reason than the run's timeout: a run stopped
// (the scheduler stopping, its lock lost) is no failure of replication;
// one that ran out of time (a source that hangs) is.
func (r *PipelineRunner) recordFailure(ctx context.Context, job Job, target string) {
	if ctx.Err() != nil && !errors.Is(context.Cause(ctx), ErrRunTimeout) {
		return
	}
	r.ReplicationMetrics.RecordFailure(job.Cluster, job.Replicate.From, target, r.now())
}

// replicationTarget returns destination name as a copy's target: its
// uploader, which must also be a storage.Bucket (a destination.Destination
// is), so that the copy can see what it holds.
func (r *PipelineRunner) replicationTarget(ctx context.Context, name string) (replicate.Target, error) {
	up, err := r.Uploader(ctx, name)
	if err != nil {
		return replicate.Target{}, fmt.Errorf("destination %s: %w", name, err)
	}
	if ro, ok := up.(interface{ ReadOnly() bool }); ok && ro.ReadOnly() {
		return replicate.Target{}, fmt.Errorf("destination %s: %w", name, storage.ErrReadOnly)
	}
	b, ok := up.(storage.Bucket)
	if bu, isBU := up.(*backup.BucketUploader); isBU {
		b, ok = bu.Bucket, true
	}
	if !ok {
		return replicate.Target{}, fmt.Errorf("destination %s: its uploader is not a bucket: a replication target must be read too", name)
	}
	return replicate.Target{Name: name, Bucket: b, Uploader: up}, nil
}

func (r *PipelineRunner) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// pruneName is the backup name a job's prune counts: a replication job
// prunes the copies of every backup config (pruneScope), or of its
// Replicate.Name.
func (j *Job) pruneName() string {
	if j.Replicate != nil {
		return j.Replicate.Name
	}
	return j.Name
}

// pruneScope returns the filter of a job's prune: a replication job counts
// and prunes only the copies it can prove a copy made (replicate.IsCopy),
// of its Replicate.Name when set (replicate.OfName), never what other jobs
// or runs wrote to its targets.
func (j *Job) pruneScope() func(*backup.Manifest) bool {
	if j.Replicate == nil {
		return nil
	}
	if name := j.Replicate.Name; name != "" {
		return func(m *backup.Manifest) bool { return replicate.IsCopy(m) && replicate.OfName(m, name) }
	}
	return replicate.IsCopy
}

// owns reports whether the backup m describes is the job's work: a backup
// of its name, or for a replication job a copy (replicate.IsCopy).
func (j *Job) owns(m *backup.Manifest) bool {
	switch {
	case m == nil:
		return false
	case j.Replicate != nil:
		return j.pruneScope()(m)
	}
	return m.Name == j.Name
}
