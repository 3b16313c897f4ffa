package backup_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage"
)

func TestMetricsFollowEvents(t *testing.T) {
	m := backup.NewMetrics()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))

	stream := fakeSnapshot(t, 500, 7)
	ok, bad := newMemUploader(), newMemUploader()
	bad.failAfter = 10
	p := &backup.Pipeline{Snapshotter: newSnapshotter(stream), Observer: m}
	_, err := p.Run(t.Context(), backup.Request{Cluster: "prod-a", Name: "n", Targets: []backup.Target{
		{Destination: "ok", Uploader: ok}, {Destination: "bad", Uploader: bad}}})
	require.Error(t, err)

	mf, _ := ok.only(t)
	want := `
# HELP etcdbackup_backup_failures_total Backups that did not reach the destination.
# TYPE etcdbackup_backup_failures_total counter
etcdbackup_backup_failures_total{cluster="prod-a",destination="bad"} 1
etcdbackup_backup_failures_total{cluster="prod-a",destination="ok"} 0
# HELP etcdbackup_backup_stored_bytes Size of the last stored backup object (compressed, encrypted).
# TYPE etcdbackup_backup_stored_bytes gauge
etcdbackup_backup_stored_bytes{cluster="prod-a",destination="ok"} ` + itoa(mf.Stored.Size) + `
# HELP etcdbackup_backup_success_total Backups committed, per destination.
# TYPE etcdbackup_backup_success_total counter
etcdbackup_backup_success_total{cluster="prod-a",destination="bad"} 0
etcdbackup_backup_success_total{cluster="prod-a",destination="ok"} 1
# HELP etcdbackup_backups_in_flight Backups running now.
# TYPE etcdbackup_backups_in_flight gauge
etcdbackup_backups_in_flight{cluster="prod-a"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		backup.MetricFailures, backup.MetricStoredBytes, backup.MetricSuccesses, backup.MetricInFlight))

	last := testutil.ToFloat64(collectorFor(t, reg, backup.MetricLastSuccess))
	require.InDelta(t, float64(time.Now().Unix()), last, 60)
	require.Equal(t, 1, testutil.CollectAndCount(m, backup.MetricDuration))
}

// TestMetricsFailureReason: a destination that refuses a backup for lack of
// space is counted under the reason "no-space", the other failure under
// "other"; FailureReason names each class.
func TestMetricsFailureReason(t *testing.T) {
	m := backup.NewMetrics()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	full, broken := newMemUploader(), newMemUploader()
	full.failAfter, full.failErr = 10, storage.Errorf("put", "c/x", storage.ErrNoSpace, errors.New("no space left on device"))
	broken.failAfter = 10
	p := &backup.Pipeline{Snapshotter: newSnapshotter(fakeSnapshot(t, 500, 7)), Observer: m}
	_, err := p.Run(t.Context(), backup.Request{Cluster: "prod-a", Name: "n", Targets: []backup.Target{
		{Destination: "full", Uploader: full}, {Destination: "broken", Uploader: broken}}})
	require.Error(t, err)
	want := `
# HELP etcdbackup_backup_failure_reasons_total Backups that did not reach the destination, by reason: no-space, permission, missing-bucket, stalled, timeout, canceled, integrity or other.
# TYPE etcdbackup_backup_failure_reasons_total counter
etcdbackup_backup_failure_reasons_total{cluster="prod-a",destination="broken",reason="other"} 1
etcdbackup_backup_failure_reasons_total{cluster="prod-a",destination="full",reason="no-space"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), backup.MetricReasons))

	for err, want := range map[error]string{
		storage.ErrPermission:                            "permission",
		fmt.Errorf("put: %w", storage.ErrBucketNotFound): "missing-bucket",
		backup.ErrDestinationStalled:                     "stalled",
		context.DeadlineExceeded:                         "timeout",
		context.Canceled:                                 "canceled",
		backup.ErrIntegrity:                              "integrity",
	} {
		require.Equal(t, want, backup.FailureReason(err), "%v", err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// collectorFor returns a collector of the one series named name.
func collectorFor(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			require.Len(t, f.GetMetric(), 1)
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
			g.Set(f.GetMetric()[0].GetGauge().GetValue())
			return g
		}
	}
	t.Fatalf("no series %s", name)
	return nil
}

// TestMetricsKnownAtZero: the counters of a cluster and destination exist
// at zero from the moment a host names them, before any run, so that a
// rate() alert sees the first failure.
func TestMetricsKnownAtZero(t *testing.T) {
	m := backup.NewMetrics()
	m.Known("prod-a", "main", "offsite")
	require.NoError(t, testutil.CollectAndCompare(m, strings.NewReader(`
# HELP etcdbackup_backup_failures_total Backups that did not reach the destination.
# TYPE etcdbackup_backup_failures_total counter
etcdbackup_backup_failures_total{cluster="prod-a",destination="main"} 0
etcdbackup_backup_failures_total{cluster="prod-a",destination="offsite"} 0
`), "etcdbackup_backup_failures_total"))
	require.Equal(t, 2, testutil.CollectAndCount(m, "etcdbackup_backup_success_total"))
}
