package schedule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/etcdbackup/etcdbackup/compact"
	"github.com/etcdbackup/etcdbackup/restore"
)

// CompactingRunner is a ContinuousRunner that also compacts a continuous
// job's chain into a synthetic full backup: the scheduler needs one for
// jobs with Continuous.CompactInterval set. PipelineRunner is one.
type CompactingRunner interface {
	ContinuousRunner
	// Compact stores a synthetic full backup of the job's cluster at the
	// last revision its chain committed, on the job's destinations. It
	// returns an error matching compact.ErrNothingToCompact when no
	// segment follows the newest full backup.
	Compact(ctx context.Context, job Job) error
}

// superviseCompaction compacts job's chain every CompactInterval, on the
// scheduler's clock, until ctx ends.
func (s *Scheduler) superviseCompaction(ctx context.Context, e *entry, job Job) {
	log := s.log.With("job", job.ID, "cluster", job.Cluster)
	for s.sleep(ctx, job.Continuous.CompactInterval) {
		err := s.compactOnce(ctx, job)
		if ctx.Err() != nil {
			return
		}
		done := err == nil
		// Nothing new since the last compaction, no chain yet, or a run of
		// the job holding its lock: the next interval tries again.
		if errors.Is(err, compact.ErrNothingToCompact) || errors.Is(err, restore.ErrNoBackup) || errors.Is(err, ErrLocked) {
			err = nil
		}
		s.mu.Lock()
		e.status.CompactError = err
		if done {
			e.status.Compactions++
		}
		s.mu.Unlock()
		if err != nil {
			log.Warn("compaction failed; trying again after the interval", "err", err)
		}
	}
}

// compactOnce waits for a run slot on the job's destinations, takes the
// job's lock (a run of the job holding it skips this compaction, with
// ErrLocked), and compacts.
func (s *Scheduler) compactOnce(ctx context.Context, job Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("runner panicked: %v", p)
		}
	}()
	release, ok := s.admit(ctx, job.Destinations)
	if !ok {
		return ctx.Err()
	}
	defer release()
	if s.lock != nil {
		held, err := s.lock.Acquire(ctx, job.ID, time.Time{})
		if err != nil {
			return fmt.Errorf("lock job for compaction: %w", err)
		}
		var unlock func(bool)
		ctx, unlock = s.whileHeld(ctx, held, "job lock", job.ID, false)
		defer unlock(false)
	}
	return s.runner.(CompactingRunner).Compact(ctx, job)
}
