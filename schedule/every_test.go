package schedule

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestEveryCountsFromTheEpoch: @every ticks are whole multiples of the
// interval since the Unix epoch, whenever the schedule is read, so that a
// host restarting more often than the interval still runs the job.
func TestEveryCountsFromTheEpoch(t *testing.T) {
	for _, tc := range []struct {
		expr string
		from []string
		want string
	}{
		{"@every 1h", []string{"2026-01-01T10:00:00Z", "2026-01-01T10:20:00Z", "2026-01-01T10:59:59Z"}, "2026-01-01T11:00:00Z"},
		{"@every 24h", []string{"2026-01-01T00:00:00Z", "2026-01-01T05:00:00Z", "2026-01-01T23:00:00Z"}, "2026-01-02T00:00:00Z"},
		{"@every 7m", []string{"2026-01-01T10:00:00Z", "2026-01-01T10:01:59Z"}, "2026-01-01T10:02:00Z"},
	} {
		for _, from := range tc.from {
			s, err := parseSchedule(tc.expr, time.UTC)
			require.NoError(t, err)
			assert.Equal(t, utc(tc.want), s.next(utc(from)).UTC(), "%s from %s", tc.expr, from)
		}
	}

	// A host that restarts every 23 hours runs an @every 24h job anyway.
	noLeaks(t)
	start := utc("2026-01-01T05:00:00Z")
	h := newHarness(t, start, Config{})
	require.NoError(t, h.s.Set(job("daily", "@every 24h")))
	for i := range 3 {
		h.clk.Set(start.Add(time.Duration(i) * 23 * time.Hour))
		h.start()
		h.advanceTo(start.Add(time.Duration(i+1)*23*time.Hour - time.Minute))
		require.NoError(t, h.stop())
	}
	calls := h.rec.callsOf("daily")
	require.NotEmpty(t, calls, "the job ran although the host restarted before each interval was over")
	for _, c := range calls {
		assert.Zero(t, c.tick.UnixNano()%int64(24*time.Hour), "tick %v is a multiple of 24h since the epoch", c.tick)
	}
}

// TestEveryAcrossReplicas: two replicas on a real EtcdLock, started 20
// minutes apart, run an @every 1h job once per hour, not twice.
func TestEveryAcrossReplicas(t *testing.T) {
	srv, running := startEtcd(t)
	t.Cleanup(func() { goleak.VerifyNone(t, running) }) // after the replicas' clients are closed
	r := newReplicas(t, srv, nil)
	start := r.clk.Now()
	j := job("ns/hourly", "@every 1h")

	require.NoError(t, r.s[0].Set(j))
	r.h[0].start()
	r.clk.Set(start.Add(20 * time.Minute))
	r.h[0].settle()
	require.NoError(t, r.s[1].Set(j))
	r.h[1].start()

	for at := start.Add(30 * time.Minute); !at.After(start.Add(3*time.Hour + 30*time.Minute)); at = at.Add(10 * time.Minute) {
		r.clk.Set(at)
		r.settle()
	}
	ticks := map[time.Time]int{}
	for _, c := range r.rec.callsOf(j.ID) {
		ticks[c.tick.UTC()]++
	}
	assert.Equal(t, map[time.Time]int{
		start.Add(time.Hour): 1, start.Add(2 * time.Hour): 1, start.Add(3 * time.Hour): 1,
	}, ticks, "one run per hour across both replicas")
	r.stop()
}
