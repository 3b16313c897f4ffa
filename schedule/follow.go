package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
)

// ContinuousRunner is a Runner that also runs continuous backups: the
// scheduler needs one for jobs with Continuous set. PipelineRunner is one.
type ContinuousRunner interface {
	Runner
	// Follow backs the job's cluster up continuously until ctx ends, then
	// stores what it holds and returns nil; an error ends it early, and
	// the scheduler starts it again after a pause. It calls started once
	// it follows etcd: after it found, or took, the full backup its chain
	// starts from.
	Follow(ctx context.Context, job Job, started func()) error
}

// FollowLockID is the ID under which a job's continuous backup takes the
// scheduler's Lock, for as long as it runs: one replica follows a cluster
// at a time, and the job's backup runs keep their own lock. No job ID is
// ever equal to it (job IDs have no control character).
func FollowLockID(jobID string) string { return jobID + "\x00follow" }

// Pauses of a continuous backup that ended: after an error (doubling up
// to followMaxBackoff), and while another replica holds its lock.
var (
	followBackoff    = time.Second
	followMaxBackoff = time.Minute
	followLockRetry  = 15 * time.Second
	admitRetry       = time.Second
)

// followRun is the continuous backup of a job while the scheduler runs.
type followRun struct {
	job       Job
	cancel    context.CancelFunc
	done      chan struct{} // closed when its supervisor has returned
	following bool          // it follows etcd now
}

// startFollow starts e's continuous backup once the one it replaces, if
// any, has ended (also one a previous Start abandoned at the end of its
// stop budget); a job that is not continuous (any more), or set while the
// scheduler stops, gets none, and the one it replaces stays on e as ending
// until it has stored what it holds, for Remove and the next follower to
// wait for. The caller holds s.mu.
func (s *Scheduler) startFollow(e *entry) {
	prev := e.follow
	e.follow = nil
	if prev != nil {
		prev.cancel()
	} else {
		prev = e.ending
	}
	e.ending = nil
	if prev == nil {
		// The job was removed and set again while the continuous backup
		// of the removed one still ends: the new one waits for it too.
		prev = s.removing[e.job.ID].lastFollow()
	}
	if e.job.Continuous == nil || !s.running || s.stopping || e.removed {
		if prev != nil && !e.removed {
			e.ending = prev
		}
		return
	}
	ctx, cancel := context.WithCancel(s.followCtx)
	f := &followRun{job: e.job.clone(), cancel: cancel, done: make(chan struct{})}
	e.follow = f
	s.wg.Add(1)
	go s.superviseFollow(ctx, s.wg, e, f, prev)
}

// superviseFollow runs f until ctx ends, starting it again after each end.
func (s *Scheduler) superviseFollow(ctx context.Context, wg *sync.WaitGroup, e *entry, f *followRun, prev *followRun) {
	defer wg.Done()
	defer func() {
		s.mu.Lock()
		if e.ending == f {
			e.ending = nil
		}
		s.mu.Unlock()
	}()
	defer close(f.done)
	defer f.cancel()
	if prev != nil {
		// prev was cancelled and stores what it holds: f ends only after
		// it, also when f is cancelled first, so that Remove, which waits
		// for f, returns only once nothing of the job runs.
		<-prev.done
		if ctx.Err() != nil {
			return
		}
	}
	if f.job.Continuous.CompactInterval > 0 {
		compacting := make(chan struct{})
		go func() {
			defer close(compacting)
			s.superviseCompaction(ctx, e, f)
		}()
		defer func() { <-compacting }() // before f.done closes
	}
	log := s.log.With("job", f.job.ID, "cluster", f.job.Cluster)
	failures := 0
	for {
		err := s.followOnce(ctx, f)
		if ctx.Err() != nil {
			return
		}
		pause := followLockRetry
		if !errors.Is(err, ErrLocked) {
			s.mu.Lock()
			e.status.FollowError = err
			e.status.FollowRestarts++
			s.mu.Unlock()
			if err == nil {
				failures = 0
			} else {
				failures++
			}
			pause = min(followBackoff<<min(failures, 10), followMaxBackoff)
			log.Warn("continuous backup ended: starting it again", "err", err, "pause", pause)
		}
		if !s.sleep(ctx, pause) {
			return
		}
	}
}

// followOnce runs f's continuous backup once: it waits for a run slot,
// takes the lock, and holds the slot until the backup follows etcd.
func (s *Scheduler) followOnce(ctx context.Context, f *followRun) error {
	release, ok := s.admit(ctx, f.job.Destinations)
	if !ok {
		return nil
	}
	defer release()
	if s.lock != nil {
		held, err := s.lock.Acquire(ctx, FollowLockID(f.job.ID), time.Time{})
		if err != nil {
			return fmt.Errorf("lock continuous backup: %w", err)
		}
		var unlock func(bool)
		ctx, unlock = s.whileHeld(ctx, held, "continuous backup lock", f.job.ID, true)
		defer unlock(false)
	}
	started := func() {
		release()
		s.mu.Lock()
		f.following = true
		s.mu.Unlock()
	}
	err := s.runner.(ContinuousRunner).Follow(ctx, f.job, started)
	s.mu.Lock()
	f.following = false
	s.mu.Unlock()
	if cause := context.Cause(ctx); err == nil && errors.Is(cause, errLockLost) {
		err = cause
	}
	return err
}

// admit waits for a run slot on dests for a continuous backup's start
// (finding where to resume, or taking the first full backup, weighs as
// much as a backup run), after the due runs that write to one of dests:
// runs queued for other destinations do not hold it back, since a
// follower kept waiting past etcd's compaction loses its chain. A due run
// that a free slot lets start goes first too: woken by the same release,
// the followers would otherwise take every slot before dispatch starts it.
// It returns a function that frees the slot, and false if ctx ended first.
func (s *Scheduler) admit(ctx context.Context, dests []string) (release func(), ok bool) {
	for {
		s.mu.Lock()
		if ctx.Err() != nil {
			// Removed, replaced or stopped (under s.mu) while a freed
			// slot woke it: the slot is for the others.
			s.mu.Unlock()
			return nil, false
		}
		if !s.queuedFor(dests) && !s.queuedStartable() && s.inFlight < s.maxRuns && s.slotsFree(dests) {
			s.inFlight++
			for _, d := range dests {
				s.perDest[d]++
			}
			s.mu.Unlock()
			return sync.OnceFunc(func() {
				s.mu.Lock()
				s.inFlight--
				for _, d := range dests {
					if s.perDest[d]--; s.perDest[d] <= 0 {
						delete(s.perDest, d)
					}
				}
				s.freeSlot()
				s.mu.Unlock()
				s.signal()
			}), true
		}
		freed := s.slotFreed
		s.mu.Unlock()
		if !s.sleepUntil(ctx, admitRetry, freed) {
			return nil, false
		}
	}
}

// freeSlot wakes the continuous backups waiting for a run slot. The
// caller holds s.mu.
func (s *Scheduler) freeSlot() {
	close(s.slotFreed)
	s.slotFreed = make(chan struct{})
}

// queuedStartable reports whether dispatch is about to start a due run: one
// that the free slots let start. The caller holds s.mu.
func (s *Scheduler) queuedStartable() bool {
	if !s.running || s.stopping || s.inFlight >= s.maxRuns {
		return false
	}
	for _, e := range s.queue {
		if s.slotsFree(e.job.Destinations) {
			return true
		}
	}
	return false
}

// queuedFor reports whether a due run waits for a slot on one of dests.
// The caller holds s.mu.
func (s *Scheduler) queuedFor(dests []string) bool {
	for _, e := range s.queue {
		for _, d := range e.job.Destinations {
			if slices.Contains(dests, d) {
				return true
			}
		}
	}
	return false
}

// sleep waits d on the scheduler's clock, and reports false if ctx ended
// first.
func (s *Scheduler) sleep(ctx context.Context, d time.Duration) bool {
	return s.sleepUntil(ctx, d, nil)
}

// sleepUntil is sleep that also ends when early is closed.
func (s *Scheduler) sleepUntil(ctx context.Context, d time.Duration, early <-chan struct{}) bool {
	wake := make(chan struct{})
	stop := s.clock.At(s.clock.Now().Add(d), func() { close(wake) })
	defer stop()
	select {
	case <-wake:
		return true
	case <-early:
		return true
	case <-ctx.Done():
		return false
	}
}

// startedObserver calls started at the first ChainStarted or ChainResumed
// event, and passes every event on.
type startedObserver struct {
	started func()
	next    backup.FollowObserver
}

func (o startedObserver) ObserveFollow(e backup.FollowEvent) {
	if e.Kind == backup.ChainStarted || e.Kind == backup.ChainResumed {
		o.started()
	}
	if o.next != nil {
		o.next.ObserveFollow(e)
	}
}
