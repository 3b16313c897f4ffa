package schedule

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLimitsUnderLoad sets 500 @hourly jobs over 8 destinations (every
// fifth job writes to two) and checks, over two ticks, that the global and
// per-destination limits are reached and never exceeded, that every job
// runs once per tick and none overlaps itself.
func TestLimitsUnderLoad(t *testing.T) {
	noLeaks(t)
	const (
		jobs       = 500
		maxRuns    = 10
		maxPerDest = 2
	)
	dests := []string{"d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7"}
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{MaxConcurrent: maxRuns, MaxPerDestination: maxPerDest})

	// The first runs wait until the scheduler has filled every slot it
	// may, so that the test sees the limits reached, not only respected.
	gate := make(chan struct{})
	h.rec.setHook(func(ctx context.Context, _ Job, _ time.Time) error {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	})
	for i := range jobs {
		j := job(fmt.Sprintf("job-%03d", i), "@hourly")
		j.Destinations = []string{dests[i%len(dests)]}
		if i%5 == 0 {
			j.Destinations = append(j.Destinations, dests[(i+3)%len(dests)])
		}
		require.NoError(t, h.s.Set(j))
	}
	h.start()

	h.clk.Set(utc("2026-01-01T01:00:00Z"))
	eventually(t, func() bool {
		h.rec.mu.Lock()
		defer h.rec.mu.Unlock()
		return h.rec.inFlight == maxRuns
	}, "the global limit to be reached")
	eventually(t, h.s.loopIdle, "loop idle")
	var queued int
	for _, st := range h.s.List() {
		if st.Queued {
			queued++
		}
	}
	assert.Equal(t, jobs-maxRuns, queued, "the rest wait for a slot")
	close(gate)
	h.settle()
	h.advanceTo(utc("2026-01-01T02:00:00Z"))

	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	assert.Len(t, h.rec.calls, 2*jobs)
	assert.Equal(t, maxRuns, h.rec.maxInFlight, "global limit reached, never exceeded")
	reached := 0
	for _, d := range dests {
		assert.LessOrEqual(t, h.rec.maxPerDest[d], maxPerDest, "destination %s", d)
		if h.rec.maxPerDest[d] == maxPerDest {
			reached++
		}
	}
	assert.Positive(t, reached, "a per-destination limit was reached")
	assert.Zero(t, h.rec.overlaps)
	perJob := map[string]int{}
	for _, c := range h.rec.calls {
		perJob[c.job]++
	}
	assert.Len(t, perJob, jobs)
	for id, n := range perJob {
		assert.Equal(t, 2, n, id)
	}
	for _, st := range h.s.List() {
		assert.Zero(t, st.SkippedRuns, st.Job.ID)
	}
	require.NoError(t, h.stop())
}

// TestPerDestinationLimitLetsOthersPass: runs waiting for a busy
// destination do not hold back the runs of other destinations.
func TestPerDestinationLimitLetsOthersPass(t *testing.T) {
	noLeaks(t)
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{MaxConcurrent: 4, MaxPerDestination: 1})
	release := make(chan struct{})
	h.rec.setHook(func(ctx context.Context, job Job, _ time.Time) error {
		if job.Destinations[0] == "busy" {
			<-release
		}
		return nil
	})
	for i := range 3 {
		j := job(fmt.Sprintf("a-busy-%d", i), "@hourly")
		j.Destinations = []string{"busy"}
		require.NoError(t, h.s.Set(j))
	}
	free := job("z-free", "@hourly")
	free.Destinations = []string{"free"}
	require.NoError(t, h.s.Set(free))
	h.start()
	h.clk.Set(utc("2026-01-01T01:00:00Z"))
	eventually(t, func() bool { return len(h.rec.callsOf("z-free")) == 1 }, "the free destination's run")
	eventually(t, h.runsReached, "loop idle, the busy run in the runner")
	assert.Equal(t, 2, h.rec.count(), "one busy run, the free one; two busy runs wait")
	close(release)
	h.settle()
	assert.Equal(t, 4, h.rec.count())
	assert.Equal(t, 1, h.rec.maxPerDest["busy"])
	require.NoError(t, h.stop())
}
