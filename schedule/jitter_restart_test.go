package schedule

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestJitteredTickAfterRestart starts a scheduler between a tick and its
// jittered start: the tick still runs at its jittered start, not an
// interval later.
func TestJitteredTickAfterRestart(t *testing.T) {
	noLeaks(t)
	const maxJitter = 10 * time.Minute
	id := ""
	for i := 0; id == ""; i++ {
		if c := fmt.Sprintf("ns/job-%d", i); jitterOf(c, maxJitter) >= time.Minute {
			id = c
		}
	}
	jitter := jitterOf(id, maxJitter)
	tick := utc("2026-01-01T11:00:00Z")

	// The process that had the tick planned for tick+jitter stopped in
	// the jitter; the one that takes over (a restart, or another replica
	// after a leader change) starts at tick+jitter/2.
	h := newHarness(t, tick.Add(jitter/2), Config{MaxJitter: maxJitter})
	require.NoError(t, h.s.Set(job(id, "@hourly")))
	h.start()
	require.Equal(t, tick.Add(jitter), h.status(id).NextRun.UTC(), "the tick is still due")

	h.advanceTo(tick.Add(jitter))
	calls := h.rec.callsOf(id)
	require.Len(t, calls, 1)
	require.Equal(t, tick, calls[0].tick.UTC())
	require.Equal(t, tick.Add(time.Hour+jitter), h.status(id).NextRun.UTC())
	require.NoError(t, h.stop())
}
