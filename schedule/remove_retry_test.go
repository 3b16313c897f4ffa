package schedule

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRemoveCancelsTheRunAtOnceAndARetryWaits: a continuous job with a
// run in flight is removed while its continuous backup stores its last
// segment. The run is cancelled at once, not after the continuous backup
// ended; the Remove whose ctx ends first fails, and a Remove of the same
// ID again returns only once the continuous backup has returned (nil
// while something of the job still ran would let a host delete the
// cluster's backups under it).
func TestRemoveCancelsTheRunAtOnceAndARetryWaits(t *testing.T) {
	var runCancelled atomic.Bool
	h, ff, j, release := followingJob(t, "@hourly", func(ctx context.Context, _ Job, _ time.Time) error {
		<-ctx.Done()
		runCancelled.Store(true)
		return ctx.Err()
	})
	h.clk.Set(utc("2026-01-01T01:00:00Z"))
	eventually(t, func() bool { return h.status(j.ID).Running }, "a run in flight")

	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() { first <- h.s.Remove(ctx, j.ID) }()
	<-ff.flushing
	eventually(t, runCancelled.Load, "the run cancelled while the continuous backup still stores")
	cancel()
	require.ErrorIs(t, <-first, context.Canceled)

	type result struct {
		err       error
		followers int
	}
	again := make(chan result, 1)
	go func() {
		err := h.s.Remove(t.Context(), j.ID)
		again <- result{err, ff.followers()}
	}()
	assert.Never(t, func() bool { return len(again) > 0 }, 200*time.Millisecond, 5*time.Millisecond,
		"the retried Remove returned while the continuous backup still stores")
	release()
	res := <-again
	require.NoError(t, res.err)
	assert.Zero(t, res.followers, "the retried Remove returned while the continuous backup ran")
	h.s.mu.Lock()
	assert.Empty(t, h.s.removing, "what the removal waited for is forgotten")
	h.s.mu.Unlock()
	require.NoError(t, h.stop())
}

// TestSetAgainWaitsForTheRemovedFollower: a continuous job removed while
// its continuous backup stores its last segment, and set again at once
// with the same ID, starts its new continuous backup only once the old
// one has returned: never two of one chain at once.
func TestSetAgainWaitsForTheRemovedFollower(t *testing.T) {
	h, ff, j, release := followingJob(t, "@daily", nil)
	ctx, cancel := context.WithCancel(t.Context())
	removed := make(chan error, 1)
	go func() { removed <- h.s.Remove(ctx, j.ID) }()
	<-ff.flushing
	cancel()
	require.ErrorIs(t, <-removed, context.Canceled)
	require.NoError(t, h.s.Set(j))
	assert.Never(t, func() bool { return ff.followers() > 1 }, 300*time.Millisecond, 5*time.Millisecond,
		"two continuous backups of one job at once")
	release()
	eventually(t, func() bool { return h.status(j.ID).Following && ff.followers() == 1 }, "the new one follows")
	require.NoError(t, h.stop())
}

// TestRemoveAfterSetAgainWaitsForTheFirstRun: a job's run slow to end its
// cancellation, a Remove that gave up waiting for it, the job set again
// (with a new run in flight, or none) and removed again: that Remove,
// and one of the then unknown ID, wait for the first run too.
func TestRemoveAfterSetAgainWaitsForTheFirstRun(t *testing.T) {
	for _, newRun := range []bool{false, true} {
		t.Run(map[bool]string{false: "idle", true: "new run in flight"}[newRun], func(t *testing.T) {
			noLeaks(t)
			h, free, firstEnded := slowFirstRun(t)
			ctx, cancel := context.WithCancel(t.Context())
			gaveUp := make(chan error, 1)
			go func() { gaveUp <- h.s.Remove(ctx, "j") }()
			eventually(t, func() bool { _, ok := h.s.Get("j"); return !ok }, "the job taken out")
			cancel()
			require.ErrorIs(t, <-gaveUp, context.Canceled)
			require.NoError(t, h.s.Set(job("j", "@hourly")))
			if newRun {
				h.clk.Set(utc("2026-01-01T02:00:00Z"))
				eventually(t, func() bool { return h.rec.count() == 2 }, "the second run")
			}
			removed := make(chan error, 1)
			go func() { removed <- h.s.Remove(t.Context(), "j") }()
			assert.Never(t, func() bool { return len(removed) > 0 }, 200*time.Millisecond, 5*time.Millisecond,
				"Remove returned while the first run still ran")
			ctx2, cancel2 := context.WithCancel(t.Context())
			cancel2()
			require.ErrorIs(t, h.s.Remove(ctx2, "j"), context.Canceled, "a Remove of the unknown ID while the first run still runs")
			free()
			<-firstEnded
			require.NoError(t, <-removed)
			require.NoError(t, h.s.Remove(t.Context(), "j"))
			require.NoError(t, h.stop())
		})
	}
}

// TestRemovalKeepsOnlyWhatStillEnds: while a removed job's run is slow to
// end, Set and Remove cycles of the same ID that give up keep only what
// still ends (never a growing record of what ended or was never there);
// once it ended, a Remove of the ID with a context already ended returns
// nil: nothing of the job runs.
func TestRemovalKeepsOnlyWhatStillEnds(t *testing.T) {
	noLeaks(t)
	h, free, _ := slowFirstRun(t)
	done, cancel := context.WithCancel(t.Context())
	cancel()
	for range 50 {
		require.ErrorIs(t, h.s.Remove(done, "j"), context.Canceled)
		require.NoError(t, h.s.Set(job("j", "@hourly")))
	}
	h.s.mu.Lock()
	rm := h.s.removing["j"]
	require.NotNil(t, rm)
	assert.Len(t, rm.runs, 1, "runs kept")
	assert.Nil(t, rm.follow, "continuous backup kept")
	h.s.mu.Unlock()
	require.ErrorIs(t, h.s.Remove(done, "j"), context.Canceled)
	free()
	eventually(t, func() bool {
		h.s.mu.Lock()
		defer h.s.mu.Unlock()
		rm := h.s.removing["j"]
		return rm == nil || rm.ended()
	}, "the run ended")
	for range 50 {
		require.NoError(t, h.s.Remove(done, "j"), "nothing of the job runs")
	}
	require.NoError(t, h.stop())
}

// slowFirstRun starts a scheduler with job "j" (@hourly) and its first
// run in flight, which ends its cancellation only once free is called;
// firstEnded is closed when it has.
func slowFirstRun(t *testing.T) (h *harness, free func(), firstEnded chan struct{}) {
	h = newHarness(t, utc("2026-01-01T00:00:00Z"), Config{})
	release := make(chan struct{})
	firstEnded = make(chan struct{})
	var first atomic.Bool
	h.rec.setHook(func(ctx context.Context, _ Job, _ time.Time) error {
		<-ctx.Done()
		if first.CompareAndSwap(false, true) {
			<-release // slow to end its cancellation
			close(firstEnded)
		}
		return ctx.Err()
	})
	require.NoError(t, h.s.Set(job("j", "@hourly")))
	h.start()
	free = sync.OnceFunc(func() { close(release) })
	t.Cleanup(free) // before the harness's stop, which waits for the run
	h.clk.Set(utc("2026-01-01T01:00:00Z"))
	eventually(t, func() bool { return h.rec.count() == 1 }, "the first run")
	return h, free, firstEnded
}

// followingJob starts a scheduler at 00:30 with a continuous job of
// schedule sched, runs taking hook (nil: none), and waits until it
// follows; its continuous backup, once cancelled, stores its last
// segment (ff.flushing) until release is called.
func followingJob(t *testing.T, sched string, hook func(context.Context, Job, time.Time) error) (*harness, *flushingFollower, Job, func()) {
	noLeaks(t)
	ff := &flushingFollower{flushing: make(chan string, 2), flushed: make(chan struct{})}
	h := newHarness(t, utc("2026-01-01T00:30:00Z"), Config{Runner: ff})
	ff.recorder = h.rec
	if hook != nil {
		h.rec.setHook(hook)
	}
	release := sync.OnceFunc(func() { close(ff.flushed) })
	h.start()
	t.Cleanup(release) // before the harness's stop, which waits for the follower
	j := job("ns/a", sched)
	j.Continuous = &Continuous{Window: time.Hour}
	require.NoError(t, h.s.Set(j))
	eventually(t, func() bool { return h.status(j.ID).Following }, "it follows")
	return h, ff, j, release
}
