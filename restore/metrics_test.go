package restore_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/restore"
)

// TestDrillMetrics records real drills through DrillJob: a pass, a failure
// (no key) and a drill that finds no backup, each in its own series.
func TestDrillMetrics(t *testing.T) {
	snap := writeFile(t, "snapshot.db", smallSnapshot(t))
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	b := memBucket(t)
	m := runBackup(t, fileSnapshotter{snap}, b, "prod-a", "nightly", backup.Zstd, id.Recipient().String())
	sources := []restore.Source{{Name: "mem", Catalog: b}}

	metrics := restore.NewDrillMetrics()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(metrics))

	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { now = now.Add(time.Second); return now }
	withKey := &restore.Restorer{Identities: []age.Identity{id}, TempDir: t.TempDir(), Now: clock}
	withoutKey := &restore.Restorer{TempDir: t.TempDir(), Now: clock}

	require.NoError(t, withKey.DrillJob(sources, restore.Query{Cluster: "prod-a"}, metrics.Record)(t.Context()))
	passedAt := float64(now.Unix())
	require.ErrorIs(t, withoutKey.DrillJob(sources, restore.Query{Cluster: "prod-a"}, metrics.Record)(t.Context()), restore.ErrDecrypt)
	require.ErrorIs(t, withKey.DrillJob(sources, restore.Query{Cluster: "prod-z"}, metrics.Record)(t.Context()), restore.ErrNoBackup)
	lastRun := float64(now.Unix())
	metrics.Record(t.Context(), nil) // ignored

	want := `
# HELP etcdbackup_restore_drill_failures_total Restore drills that failed, or found no backup to drill.
# TYPE etcdbackup_restore_drill_failures_total counter
etcdbackup_restore_drill_failures_total{cluster="prod-a",destination="mem"} 1
etcdbackup_restore_drill_failures_total{cluster="prod-z",destination="mem"} 1
# HELP etcdbackup_restore_drill_success_total Restore drills that proved a backup restorable.
# TYPE etcdbackup_restore_drill_success_total counter
etcdbackup_restore_drill_success_total{cluster="prod-a",destination="mem"} 1
etcdbackup_restore_drill_success_total{cluster="prod-z",destination="mem"} 0
# HELP etcdbackup_restore_drill_last_success_timestamp_seconds Unix time the last restore drill that passed ended.
# TYPE etcdbackup_restore_drill_last_success_timestamp_seconds gauge
etcdbackup_restore_drill_last_success_timestamp_seconds{cluster="prod-a",destination="mem"} ` + ftoa(passedAt) + `
# HELP etcdbackup_restore_drill_backup_created_timestamp_seconds Unix time the backup the last passed drill restored was created.
# TYPE etcdbackup_restore_drill_backup_created_timestamp_seconds gauge
etcdbackup_restore_drill_backup_created_timestamp_seconds{cluster="prod-a",destination="mem"} ` + ftoa(float64(m.Created.UnixNano())/1e9) + `
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		restore.MetricDrillFailures, restore.MetricDrillSuccesses, restore.MetricDrillLastSuccess, restore.MetricDrillBackupCreated))

	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != restore.MetricDrillLastRun {
			continue
		}
		require.Len(t, f.GetMetric(), 2)
		for _, s := range f.GetMetric() {
			require.LessOrEqual(t, s.GetGauge().GetValue(), lastRun)
			require.Greater(t, s.GetGauge().GetValue(), passedAt-1)
		}
	}
	require.Equal(t, 2, testutil.CollectAndCount(metrics, restore.MetricDrillDuration))
}

// ftoa formats f so that it parses back to f exactly.
func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
