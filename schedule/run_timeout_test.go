package schedule

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunTimeout: a run that stalls (a destination that stops answering)
// is cancelled at RunTimeout with ErrRunTimeout, frees its slot, and the
// job's next tick runs instead of being skipped as an overlap.
func TestRunTimeout(t *testing.T) {
	noLeaks(t)
	h := newHarness(t, utc("2026-01-01T00:30:00Z"), Config{RunTimeout: 10 * time.Minute})
	giveUp := make(chan struct{})
	h.rec.setHook(func(ctx context.Context, _ Job, _ time.Time) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-giveUp:
			return errors.New("the test ended")
		}
	})
	require.NoError(t, h.s.Set(job("ns/a", "@hourly")))
	h.start()
	t.Cleanup(func() { close(giveUp) }) // before the harness stops the scheduler, if a check fails
	h.clk.Set(utc("2026-01-01T01:00:00Z"))
	eventually(t, func() bool { return len(h.rec.callsOf("ns/a")) == 1 }, "the run to start")
	h.advanceTo(utc("2026-01-01T01:10:00Z"))
	st := h.status("ns/a")
	assert.False(t, st.Running, "the stalled run was cancelled")
	require.ErrorIs(t, st.LastError, ErrRunTimeout)
	assert.Zero(t, st.SkippedRuns)

	h.rec.setHook(nil)
	h.advanceTo(utc("2026-01-01T02:00:00Z"))
	st = h.status("ns/a")
	assert.NoError(t, st.LastError, "the next tick ran")
	assert.Len(t, h.rec.callsOf("ns/a"), 2)
	assert.Zero(t, st.SkippedRuns)
	require.NoError(t, h.stop())
}
