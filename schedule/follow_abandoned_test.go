package schedule

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// abandonFollower starts a continuous job with ff as runner, stops the
// scheduler while ff stores its last segment and spends the stop budget:
// Start returns with the follower abandoned, still writing.
func abandonFollower(t *testing.T) (*harness, *flushingFollower, Job, func()) {
	ff := &flushingFollower{flushing: make(chan string, 4), flushed: make(chan struct{})}
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{Runner: ff, StopTimeout: time.Minute})
	ff.recorder = h.rec
	release := sync.OnceFunc(func() { close(ff.flushed) })
	t.Cleanup(release)
	h.start()
	j := job("ns/a", "@daily")
	j.Continuous = &Continuous{Window: time.Hour}
	require.NoError(t, h.s.Set(j))
	eventually(t, func() bool { return h.status(j.ID).Following }, "following")

	h.cancel()
	<-ff.flushing // the follower stores its last segment, slowly
	eventually(t, func() bool { return h.s.isStopping() && h.clk.Pending() > 0 }, "stop deadlines armed")
	h.clk.Advance(time.Minute)
	require.NoError(t, <-h.done)
	h.cancel = nil
	require.Equal(t, 1, ff.followers(), "the abandoned follower still runs")
	return h, ff, j, release
}

// TestStartWaitsForAbandonedFollower: a follower abandoned at the end of
// the stop budget is still the job's: a new Start does not start a second
// follower of the job beside it, and Remove does not report the job gone
// while it writes.
func TestStartWaitsForAbandonedFollower(t *testing.T) {
	h, ff, j, release := abandonFollower(t)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.s.Start(ctx) }()
	eventually(t, func() bool {
		h.s.mu.Lock()
		defer h.s.mu.Unlock()
		return h.s.running
	}, "started again")
	// The new follower is not admitted while the old one runs: watch
	// for a while that no second one starts.
	for range 50 {
		require.Equal(t, 1, ff.followers(), "a second follower of the job runs beside the abandoned one")
		time.Sleep(10 * time.Millisecond)
	}

	rctx, rcancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer rcancel()
	assert.Error(t, h.s.Remove(rctx, j.ID), "Remove returned nil while the abandoned follower still writes")
	release()
	eventually(t, func() bool { return ff.followers() == 0 }, "the abandoned follower ended")
	cancel()
	require.NoError(t, <-done)
}

// TestRemoveWaitsForAbandonedFollower: after Start returned with a
// follower abandoned, Remove waits for it.
func TestRemoveWaitsForAbandonedFollower(t *testing.T) {
	h, ff, j, release := abandonFollower(t)

	rctx, rcancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer rcancel()
	assert.Error(t, h.s.Remove(rctx, j.ID), "Remove returned nil while the abandoned follower still writes")
	release()
	eventually(t, func() bool { return ff.followers() == 0 }, "the abandoned follower ended")
}
