package schedule

import "time"

// SkipReason says why a run that was due did not happen.
type SkipReason string

// The reasons a run is skipped.
const (
	// SkipOverlap: the job's previous run was still going (or still
	// waiting for a slot) when the next tick came; a job never overlaps
	// itself.
	SkipOverlap SkipReason = "overlap"
	// SkipLocked: another holder of the job's Lock was running it.
	SkipLocked SkipReason = "locked"
	// SkipDone: the Lock said the tick was already completed, by another
	// replica.
	SkipDone SkipReason = "done"
)

// skipReasons lists every SkipReason, for metrics.
var skipReasons = []SkipReason{SkipOverlap, SkipLocked, SkipDone}

// Status is what the scheduler knows of one job. Times are zero when
// unknown.
type Status struct {
	// NextRun is when the job runs next, jitter included. It is zero for a
	// one-shot job that ran. Before Start, and for a job waiting for its
	// Inventory check, it is an estimate: Start reschedules every job.
	NextRun time.Time
	// Running is set while a run is in flight; Queued while a run is due
	// but waits for a free slot.
	Running, Queued bool

	// LastRun is when the last run started and LastTick the tick it was
	// for (zero for a one-shot or a first catch-up run).
	LastRun, LastTick time.Time
	// LastSuccess is when the last successful run ended.
	LastSuccess time.Time
	// LastDuration is how long the last run took.
	LastDuration time.Duration
	// LastError is the error of the last run; nil after a success.
	LastError error
	// ConsecutiveFailures counts failed runs since the last success.
	ConsecutiveFailures int
	// Successes and Failures count the runs since the job was set.
	Successes, Failures int64

	// SkippedRuns counts runs that were due but skipped, LastSkip is when
	// the last was, and LastSkipReason why.
	SkippedRuns    int64
	LastSkip       time.Time
	LastSkipReason SkipReason

	// LastPruneError is the error of the last Prune (nil after one that
	// succeeded); PruneFailures counts them. A failed prune does not fail
	// the run: the backup was made.
	LastPruneError error
	PruneFailures  int64

	// Following is set while the job's continuous backup follows etcd
	// (Job.Continuous). FollowError is the error that last ended it (nil
	// if it last ended without one, or never ended), and FollowRestarts
	// counts the times it ended and was started again.
	Following      bool
	FollowError    error
	FollowRestarts int64
	// Compactions counts the synthetic full backups the job's compaction
	// stored (Continuous.CompactInterval); CompactError is the error of
	// the last compaction, nil after one that succeeded or had nothing to
	// compact.
	Compactions  int64
	CompactError error
}

// JobStatus is a job with its status.
type JobStatus struct {
	Job Job
	Status
}
