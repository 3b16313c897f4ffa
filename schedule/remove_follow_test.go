package schedule

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRemoveWaitsForFollowerAfterContinuousTurnedOff: a continuous job set to
// non-continuous, then removed: Remove does not return nil while the old
// follower still stores its last segment; it waits until its ctx ends.
func TestRemoveWaitsForFollowerAfterContinuousTurnedOff(t *testing.T) {
	ff := &flushingFollower{flushing: make(chan string, 2), flushed: make(chan struct{})}
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{Runner: ff})
	ff.recorder = h.rec
	release := sync.OnceFunc(func() { close(ff.flushed) })
	h.start()
	t.Cleanup(release)

	j := job("ns/a", "@daily")
	j.Continuous = &Continuous{Window: time.Hour}
	require.NoError(t, h.s.Set(j))
	eventually(t, func() bool { return h.status(j.ID).Following }, "follows")

	j.Continuous = nil
	require.NoError(t, h.s.Set(j))
	<-ff.flushing

	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	err := h.s.Remove(ctx, j.ID)
	t.Logf("Remove returned %v with %d follower(s) still writing", err, ff.followers())
	require.ErrorIs(t, err, context.DeadlineExceeded, "Remove returned while the old follower was still writing")
	release()
}
