package schedule

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRestartInJitterWindowRunsTickOnceWithInventory: after a restart in
// the jitter window of tick T, with an Inventory and no Lock, T runs once, at
// its jittered start: the inventory catch-up does not also run it at once.
func TestRestartInJitterWindowRunsTickOnceWithInventory(t *testing.T) {
	const maxJitter = 10 * time.Minute
	id := ""
	for i := 0; id == ""; i++ {
		if c := fmt.Sprintf("ns/job-%d", i); jitterOf(c, maxJitter) >= time.Minute {
			id = c
		}
	}
	jitter := jitterOf(id, maxJitter)
	tick := utc("2026-01-01T11:00:00Z")
	// the previous tick (10:00) ran at its jittered start and committed.
	inv := &inventory{answers: map[string]lastBackup{id: {created: tick.Add(-time.Hour + jitter + 5*time.Second), ok: true}}}
	h := newHarness(t, tick.Add(10*time.Second), Config{MaxJitter: maxJitter, Inventory: inv})
	require.NoError(t, h.s.Set(job(id, "@hourly")))
	h.start()
	h.advanceTo(tick.Add(jitter + time.Second))
	calls := h.rec.callsOf(id)
	for _, c := range calls {
		t.Logf("run tick=%s at=%s", c.tick.UTC(), c.at.UTC())
	}
	require.Len(t, calls, 1, "tick 11:00 must run once")
	require.NoError(t, h.stop())
}
