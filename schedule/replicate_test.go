package schedule

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/replicate"
	"github.com/etcdbackup/etcdbackup/retention"
)

// TestSchedulerReplicates runs a backup job to one destination and a
// replication job from it to another: the target keeps the copies of the
// window, pruned by the replication job's own retention, and the metrics
// say it is in step.
func TestSchedulerReplicates(t *testing.T) {
	noLeaks(t)
	dests := newMemDestinations(t, "primary", "vault")
	start := utc("2026-01-01T00:30:00Z")
	h := newHarness(t, start, Config{})
	runner := dests.runner(&streamSnapshotter{}, h.clk.Now)
	metrics := replicate.NewMetrics()
	runner.ReplicationMetrics = metrics
	h.s.runner = runner
	h.s.inventory = dests.inventory()
	require.NoError(t, h.s.Set(Job{ID: "ns/backup", Schedule: "0 * * * *", Cluster: "prod-a", Name: "hourly",
		Destinations: []string{"primary"}}))
	repl := Job{ID: "ns/replicate", Schedule: "30 * * * *", Cluster: "prod-a", Name: "vault",
		Destinations: []string{"vault"}, Retention: retention.KeepLast(2),
		Replicate: &Replicate{From: "primary", Window: 150 * time.Minute}}
	require.NoError(t, h.s.Set(repl))
	h.start()
	for _, at := range []string{"2026-01-01T01:00:00Z", "2026-01-01T01:30:00Z", "2026-01-01T02:00:00Z",
		"2026-01-01T02:30:00Z", "2026-01-01T03:00:00Z", "2026-01-01T03:30:00Z"} {
		h.advanceTo(utc(at))
	}
	st := h.status("ns/replicate")
	require.NoError(t, st.LastError)
	require.NoError(t, st.LastPruneError)
	require.NoError(t, h.stop())

	src, dst := backupsOf(t, dests["primary"], "prod-a"), backupsOf(t, dests["vault"], "prod-a")
	require.Len(t, src, 4)
	require.Len(t, dst, 2, "the replication job's retention keeps two")
	for i, e := range dst {
		assert.Equal(t, src[len(src)-2+i].ID, e.ID)
		assert.Equal(t, "vault", e.Manifest.Destination)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics)
	assert.Zero(t, gaugeValue(t, reg, replicate.MetricLag))
	assert.Zero(t, gaugeValue(t, reg, replicate.MetricBehind))
	assert.Equal(t, float64(utc("2026-01-01T03:30:00Z").Unix()), gaugeValue(t, reg, replicate.MetricInStep))
	assert.Positive(t, gaugeValue(t, reg, replicate.MetricBackups))
}

// gaugeValue returns the value of the only series of the metric name.
func gaugeValue(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			require.Len(t, mf.GetMetric(), 1, name)
			m := mf.GetMetric()[0]
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestReplicateJobValidate(t *testing.T) {
	base := Job{ID: "a", Schedule: "@hourly", Cluster: "prod", Name: "vault", Destinations: []string{"vault"},
		Replicate: &Replicate{From: "primary"}}
	require.NoError(t, base.Validate())
	for name, mutate := range map[string]func(j *Job){
		"source is a target":           func(j *Job) { j.Replicate = &Replicate{From: "vault"} },
		"no source":                    func(j *Job) { j.Replicate = &Replicate{} },
		"negative window":              func(j *Job) { j.Replicate = &Replicate{From: "primary", Window: -time.Hour} },
		"point-in-time under a minute": func(j *Job) { j.Replicate = &Replicate{From: "primary", PointInTime: time.Second} },
		"compression":                  func(j *Job) { j.Compression = backup.Gzip },
		"continuous":                   func(j *Job) { j.Continuous = &Continuous{Window: time.Hour} },
	} {
		j := base.clone()
		mutate(&j)
		assert.Error(t, j.Validate(), name)
	}
	other := base.clone()
	other.Replicate.Window = time.Hour
	assert.False(t, base.equal(&other), "a changed window is another job")
	assert.Equal(t, time.Duration(0), base.Replicate.Window, "clone copies Replicate")
}
