package schedule

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOneShotRunTimeoutRunsAgain: a one-shot job whose run is cancelled at
// RunTimeout is not done: it runs again, and is done once a run returns.
func TestOneShotRunTimeoutRunsAgain(t *testing.T) {
	noLeaks(t)
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{RunTimeout: 10 * time.Minute})
	giveUp := make(chan struct{})
	h.rec.setHook(func(ctx context.Context, _ Job, _ time.Time) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-giveUp:
			return errors.New("the test ended")
		}
	})
	h.start()
	t.Cleanup(func() { close(giveUp) }) // before the harness stops the scheduler, if a check fails
	require.NoError(t, h.s.Set(job("ns/once", "")))
	eventually(t, func() bool { return len(h.rec.callsOf("ns/once")) == 1 }, "the run to start")

	h.rec.setHook(nil)
	h.advanceTo(utc("2026-01-01T00:10:00Z"))
	eventually(t, func() bool { return len(h.rec.callsOf("ns/once")) == 2 }, "the one-shot job to run again")
	h.settle()
	st := h.status("ns/once")
	assert.NoError(t, st.LastError, "the second run succeeded")
	assert.True(t, st.NextRun.IsZero(), "the job is done")

	h.advanceTo(utc("2026-01-01T02:00:00Z"))
	assert.Len(t, h.rec.callsOf("ns/once"), 2, "a done one-shot job does not run again")
	require.NoError(t, h.stop())
}
