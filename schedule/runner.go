package schedule

import (
	"context"
	"errors"
	"time"
)

// Runner does the work of a job's runs. PipelineRunner is the
// implementation on backup.Pipeline and retention.Pruner; a host may
// substitute its own.
type Runner interface {
	// Backup takes one backup of the job. tick is the time of the
	// schedule's tick the run is for (before jitter), zero for a one-shot
	// job and for the catch-up run of a job never backed up. ctx ends
	// when the run is cancelled (the job removed, the scheduler stopped
	// past its deadline, its lock lost): the backup must then abort and
	// leave nothing visible.
	Backup(ctx context.Context, job Job, tick time.Time) error
	// Prune applies the job's retention policy on its destinations. The
	// scheduler calls it after each successful Backup of a scheduled job.
	Prune(ctx context.Context, job Job) error
}

// RunnerFuncs adapts functions to a Runner. A nil function does nothing
// and succeeds.
type RunnerFuncs struct {
	// BackupFunc is called by Backup.
	BackupFunc func(ctx context.Context, job Job, tick time.Time) error
	// PruneFunc is called by Prune.
	PruneFunc func(ctx context.Context, job Job) error
}

// Backup calls BackupFunc.
func (f RunnerFuncs) Backup(ctx context.Context, job Job, tick time.Time) error {
	if f.BackupFunc == nil {
		return nil
	}
	return f.BackupFunc(ctx, job, tick)
}

// Prune calls PruneFunc.
func (f RunnerFuncs) Prune(ctx context.Context, job Job) error {
	if f.PruneFunc == nil {
		return nil
	}
	return f.PruneFunc(ctx, job)
}

// Inventory tells when a job last backed up successfully, from what its
// destinations hold rather than from the scheduler's memory, so that runs
// missed while no scheduler was running (a restart, a leader change) are
// noticed. CatalogInventory lists the destinations; a host with a synced
// inventory of its destinations answers from it.
type Inventory interface {
	// LastBackup returns the creation time of the job's newest backup
	// that every one of its destinations holds, and false when some
	// destination holds none.
	LastBackup(ctx context.Context, job Job) (created time.Time, ok bool, err error)
}

// Lock keeps the replicas of a host, each with its own scheduler, from
// running the same job at the same time, and from running the same tick
// twice. EtcdLock keeps it in etcd.
type Lock interface {
	// Acquire takes the job's lock for a run of tick. It returns an error
	// matching ErrLocked when another holder has the lock, and ErrTickDone
	// when tick (or a later tick) was already completed. A zero tick (a
	// one-shot run, or the catch-up of a job never backed up) takes the
	// lock without that check.
	Acquire(ctx context.Context, jobID string, tick time.Time) (Held, error)
}

// Held is a lock taken by Lock.Acquire.
type Held interface {
	// Lost is closed if the lock is lost before Release (its lease
	// expired): the run is then cancelled, since another replica may take
	// the lock.
	Lost() <-chan struct{}
	// Release records the tick as completed when completed is true (and
	// the tick is not zero), then releases the lock.
	Release(ctx context.Context, completed bool) error
}

var (
	// ErrLocked is returned by Lock.Acquire when another holder has the
	// job's lock.
	ErrLocked = errors.New("job is locked by another holder")
	// ErrTickDone is returned by Lock.Acquire when the tick was already
	// completed.
	ErrTickDone = errors.New("tick already completed")
)
