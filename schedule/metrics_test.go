package schedule

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCollector(t *testing.T) {
	noLeaks(t)
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{})
	h.rec.setHook(func(_ context.Context, job Job, _ time.Time) error {
		if job.ID == "ns/b" {
			return errors.New("snapshot: password=hunter2 is never in a label")
		}
		return nil
	})
	a := job("ns/a", "@hourly")
	b := job("ns/b", "@hourly")
	b.Cluster = "prod-b"
	require.NoError(t, h.s.Set(a))
	require.NoError(t, h.s.Set(b))
	h.start()
	h.advanceTo(utc("2026-01-01T01:00:00Z"))

	c := h.s.Collector()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP etcdbackup_schedule_jobs Jobs set in the scheduler.
# TYPE etcdbackup_schedule_jobs gauge
etcdbackup_schedule_jobs 2
# HELP etcdbackup_schedule_runs_in_flight Runs in flight.
# TYPE etcdbackup_schedule_runs_in_flight gauge
etcdbackup_schedule_runs_in_flight 0
# HELP etcdbackup_schedule_next_run_timestamp_seconds When the job runs next, in seconds since the epoch.
# TYPE etcdbackup_schedule_next_run_timestamp_seconds gauge
etcdbackup_schedule_next_run_timestamp_seconds{backup_job="ns/a",cluster="prod-a"} 1.7672328e+09
etcdbackup_schedule_next_run_timestamp_seconds{backup_job="ns/b",cluster="prod-b"} 1.7672328e+09
# HELP etcdbackup_schedule_last_success_timestamp_seconds When the job's last successful run ended, in seconds since the epoch.
# TYPE etcdbackup_schedule_last_success_timestamp_seconds gauge
etcdbackup_schedule_last_success_timestamp_seconds{backup_job="ns/a",cluster="prod-a"} 1.7672292e+09
# HELP etcdbackup_schedule_consecutive_failures Failed runs of the job since its last success.
# TYPE etcdbackup_schedule_consecutive_failures gauge
etcdbackup_schedule_consecutive_failures{backup_job="ns/a",cluster="prod-a"} 0
etcdbackup_schedule_consecutive_failures{backup_job="ns/b",cluster="prod-b"} 1
# HELP etcdbackup_schedule_runs_total Runs of the job that ended, by result.
# TYPE etcdbackup_schedule_runs_total counter
etcdbackup_schedule_runs_total{backup_job="ns/a",cluster="prod-a",result="failure"} 0
etcdbackup_schedule_runs_total{backup_job="ns/a",cluster="prod-a",result="success"} 1
etcdbackup_schedule_runs_total{backup_job="ns/b",cluster="prod-b",result="failure"} 1
etcdbackup_schedule_runs_total{backup_job="ns/b",cluster="prod-b",result="success"} 0
# HELP etcdbackup_schedule_skipped_runs_total Runs of the job that were due but skipped, by reason.
# TYPE etcdbackup_schedule_skipped_runs_total counter
etcdbackup_schedule_skipped_runs_total{backup_job="ns/a",cluster="prod-a",reason="done"} 0
etcdbackup_schedule_skipped_runs_total{backup_job="ns/a",cluster="prod-a",reason="locked"} 0
etcdbackup_schedule_skipped_runs_total{backup_job="ns/a",cluster="prod-a",reason="overlap"} 0
etcdbackup_schedule_skipped_runs_total{backup_job="ns/b",cluster="prod-b",reason="done"} 0
etcdbackup_schedule_skipped_runs_total{backup_job="ns/b",cluster="prod-b",reason="locked"} 0
etcdbackup_schedule_skipped_runs_total{backup_job="ns/b",cluster="prod-b",reason="overlap"} 0
`), MetricJobs, MetricRunsInFlight, MetricNextRun, MetricLastSuccess, MetricConsecutiveFailures, MetricRuns, MetricSkippedRuns))

	// Every series of a job is labelled by job and cluster only, and
	// no error text reaches a label.
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				assert.Contains(t, []string{"backup_job", "cluster", "result", "reason"}, l.GetName())
				assert.NotContains(t, l.GetValue(), "hunter2")
			}
		}
	}

	// A removed job's series go with it.
	perJob := testutil.CollectAndCount(c, MetricRunning)
	assert.Equal(t, 2, perJob)
	require.NoError(t, h.s.Remove(context.Background(), "ns/b"))
	assert.Equal(t, 1, testutil.CollectAndCount(c, MetricRunning))
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP etcdbackup_schedule_jobs Jobs set in the scheduler.
# TYPE etcdbackup_schedule_jobs gauge
etcdbackup_schedule_jobs 1
`), MetricJobs))
	require.NoError(t, h.stop())
}

// TestHeartbeat: while the scheduler runs, its loop passes at least every
// minute, jobs or not, and the heartbeat series says when it last did; a
// stopped scheduler has none, so that an alert sees it down.
func TestHeartbeat(t *testing.T) {
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{})
	c := h.s.Collector()
	require.Zero(t, testutil.CollectAndCount(c, MetricHeartbeat), "not started")
	h.start()
	h.settle()
	require.Equal(t, float64(utc("2026-01-01T00:00:00Z").Unix()), testutil.ToFloat64(gatherOne(t, c, MetricHeartbeat)))
	h.advanceTo(utc("2026-01-01T00:05:00Z"))
	require.Equal(t, float64(utc("2026-01-01T00:05:00Z").Unix()), testutil.ToFloat64(gatherOne(t, c, MetricHeartbeat)),
		"no job, yet the loop passed")
	require.NoError(t, h.stop())
	require.Zero(t, testutil.CollectAndCount(c, MetricHeartbeat), "stopped")
}

// gatherOne returns a collector of c's series named name alone.
func gatherOne(t *testing.T, c prometheus.Collector, name string) prometheus.Collector {
	t.Helper()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			require.Len(t, mf.GetMetric(), 1)
			return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: "copy"}, func() float64 { return mf.GetMetric()[0].GetGauge().GetValue() })
		}
	}
	t.Fatalf("no series %s", name)
	return nil
}
