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
	// LastCompaction returns when the newest synthetic full backup of the
	// job was created on its destinations, the zero time when there is
	// none: the next compaction is due an interval after it, whichever
	// process or replica made it.
	LastCompaction(ctx context.Context, job Job) (time.Time, error)
}

// superviseCompaction compacts f's chain every CompactInterval, on the
// scheduler's clock, until ctx ends. The next compaction is due an
// interval after the newest synthetic full backup the destinations hold
// (so a restart does not put it off by a whole interval), and never
// sooner than an interval after the last attempt. Only a replica whose
// follower runs compacts: a standby, which does not hold the follow lock,
// skips its turn.
func (s *Scheduler) superviseCompaction(ctx context.Context, e *entry, f *followRun) {
	job, interval := f.job, f.job.Continuous.CompactInterval
	log := s.log.With("job", job.ID, "cluster", job.Cluster)
	var attempted time.Time
	for {
		next := s.clock.Now().Add(interval)
		if !attempted.IsZero() {
			next = attempted.Add(interval)
		}
		if last, err := s.runner.(CompactingRunner).LastCompaction(ctx, job); err != nil {
			log.Debug("newest synthetic full backup not known; compacting an interval after the last attempt", "err", err)
		} else if !last.IsZero() && (attempted.IsZero() || last.Add(interval).After(next)) {
			next = last.Add(interval)
		}
		// A synthetic full backup dated in the future (clock skew) delays
		// the next compaction by one interval at most.
		if limit := s.clock.Now().Add(interval); next.After(limit) {
			next = limit
		}
		if !s.sleep(ctx, next.Sub(s.clock.Now())) {
			return
		}
		attempted = s.clock.Now()
		s.mu.Lock()
		following := f.following
		s.mu.Unlock()
		if !following {
			continue // a standby replica, or a follower starting again
		}
		err := s.compactOnce(ctx, job)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrLocked) {
			continue // a run of the job holds its lock: nothing learnt
		}
		done := err == nil
		// Nothing new since the last compaction, or no chain yet: the
		// next interval tries again.
		if errors.Is(err, compact.ErrNothingToCompact) || errors.Is(err, restore.ErrNoBackup) {
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
