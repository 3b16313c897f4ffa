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
	noLeaks(t)
	ff := &flushingFollower{flushing: make(chan string, 2), flushed: make(chan struct{})}
	h := newHarness(t, utc("2026-01-01T00:30:00Z"), Config{Runner: ff})
	ff.recorder = h.rec
	release := sync.OnceFunc(func() { close(ff.flushed) })
	t.Cleanup(release)
	var runCancelled atomic.Bool
	h.rec.setHook(func(ctx context.Context, _ Job, _ time.Time) error {
		<-ctx.Done()
		runCancelled.Store(true)
		return ctx.Err()
	})
	h.start()
	j := job("ns/a", "@hourly")
	j.Continuous = &Continuous{Window: time.Hour}
	require.NoError(t, h.s.Set(j))
	eventually(t, func() bool { return h.status(j.ID).Following }, "it follows")
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
	noLeaks(t)
	ff := &flushingFollower{flushing: make(chan string, 2), flushed: make(chan struct{})}
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{Runner: ff})
	ff.recorder = h.rec
	release := sync.OnceFunc(func() { close(ff.flushed) })
	t.Cleanup(release)
	h.start()
	j := job("ns/a", "@daily")
	j.Continuous = &Continuous{Window: time.Hour}
	require.NoError(t, h.s.Set(j))
	eventually(t, func() bool { return h.status(j.ID).Following }, "it follows")
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
