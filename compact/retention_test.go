package compact_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/compact"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/retention"
)

// TestRetentionKeepsTheWindowOverSyntheticFulls prunes a chain compacted
// twice with a point-in-time window and keep-last 1: first with the window
// reaching back before the compactions (nothing of the chain goes), then
// with the newest synthetic full backup before the window's start (the
// older fulls and the segments it replaces go). After each, every revision
// of the window finds a plan, and a drill of some restores each exactly.
func TestRetentionKeepsTheWindowOverSyntheticFulls(t *testing.T) {
	ctx := t.Context()
	c := startChain(t)
	var synthetic []int64
	for i, prefix := range []string{"/w1", "/w2"} {
		revs := workload(t, c.cli, prefix, 30)
		c.waitCommitted(t, revs[len(revs)-1])
		res, err := c.compactor(t).Compact(ctx, compact.Request{Cluster: "prod-a", Sources: c.sources(), Targets: c.targets(c.bucket)})
		require.NoError(t, err, "compaction %d", i)
		synthetic = append(synthetic, res.Revision)
	}
	revs := workload(t, c.cli, "/w3", 30)
	last := revs[len(revs)-1]
	c.waitCommitted(t, last)
	require.NoError(t, c.stop())

	entries, err := backup.ListBackups(ctx, c.bucket, "prod-a")
	require.NoError(t, err)
	fullRev := entries[0].Manifest.Etcd.Revision.Low
	requireWindow := func(from int64) {
		t.Helper()
		for rev := from; rev <= last; rev++ {
			_, err := restore.FindPoint(ctx, c.sources(), restore.Point{Cluster: "prod-a", Revision: rev})
			require.NoError(t, err, "revision %d of the window", rev)
		}
		r := &restore.Restorer{Identities: c.compactor(t).Restorer.Identities, TempDir: t.TempDir()}
		for _, rev := range []int64{from, (from + last) / 2, last} {
			plan, err := restore.FindPoint(ctx, c.sources(), restore.Point{Cluster: "prod-a", Revision: rev})
			require.NoError(t, err)
			d, err := r.DrillPoint(ctx, plan)
			require.NoError(t, err, "drill of revision %d", rev)
			require.Equal(t, rev, d.Status.Revision)
		}
	}
	// The plan of a pruner at now, carried out: the store's clock, which
	// a Pruner also asks, cannot be moved forward.
	prune := func(now time.Time) (deleted int) {
		t.Helper()
		entries, err := backup.ListBackups(ctx, c.bucket, "prod-a")
		require.NoError(t, err)
		plan, err := retention.MakePlan("prod-a", entries, retention.KeepLast(1), now, retention.PlanOptions{})
		require.NoError(t, err)
		plan, err = retention.PointInTime(time.Hour).Apply(plan)
		require.NoError(t, err)
		for _, d := range plan.Decisions {
			if d.Action == retention.Delete {
				require.NoError(t, c.bucket.Delete(ctx, d.Entry.ManifestKey))
				require.NoError(t, c.bucket.Delete(ctx, d.Entry.Key))
				deleted++
			}
		}
		return deleted
	}

	require.Zero(t, prune(time.Now()), "the window reaches before every full backup")
	requireWindow(fullRev)

	// An hour and the clock skew later, the window starts after every
	// backup: the newest synthetic full is its base.
	require.Positive(t, prune(time.Now().Add(time.Hour+retention.DefaultClockSkew+time.Minute)))
	entries, err = backup.ListBackups(ctx, c.bucket, "prod-a")
	require.NoError(t, err)
	for _, e := range entries {
		switch {
		case e.Kind == backup.KindDelta:
			require.Greater(t, e.Manifest.LastRevision, synthetic[1], "segment %s before the base is gone", e.ID)
		case e.Kind == backup.KindBackup:
			require.Equal(t, synthetic[1], e.Manifest.Etcd.Revision.Low, "only the base is left: %s", e.ID)
		}
	}
	requireWindow(synthetic[1])
}
