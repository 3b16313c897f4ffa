package compact_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/compact"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/replicate"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/retention"
)

// TestReplicatedChainPrunedByTheWindow copies a real chain compacted twice
// (MinIO, zstd, age) to a second bucket, next to its first segment written
// there by a fanned-out run (not a copy), and prunes the target with a
// point-in-time window scoped to the copies (replicate.IsCopy), as a
// replication job's retention does. Once the window's base is the newest
// synthetic full backup, the copied segments before it go; the fanned-out
// segment and the full backup it restores on top of stay; every revision
// from the base on restores from the target alone, exactly; and a copy
// with the same window in its selection copies nothing back.
func TestReplicatedChainPrunedByTheWindow(t *testing.T) {
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

	target := newS3(t, c.srv, c.srv.NewBucket(t, miniotest.BucketOptions{}))
	entries, err := backup.ListBackups(ctx, c.bucket, "prod-a")
	require.NoError(t, err)
	var first, chainFull backup.Entry
	for _, e := range entries {
		if e.Kind == backup.KindDelta && (first.Manifest == nil || e.Manifest.FirstRevision < first.Manifest.FirstRevision) {
			first = e
		}
	}
	for _, e := range entries {
		if e.ID == first.Manifest.Chain {
			chainFull = e
		}
	}
	require.NotNil(t, chainFull.Manifest, "the chain's full backup")
	for _, key := range []string{first.Key, first.ManifestKey} {
		rc, err := c.bucket.Get(ctx, key)
		require.NoError(t, err)
		require.NoError(t, target.Put(ctx, key, rc, nil))
		require.NoError(t, rc.Close())
	}

	copier := &replicate.Copier{Source: c.bucket, SourceName: "minio", Target: replicate.Target{Name: "vault", Bucket: target}}
	rep, err := copier.Copy(ctx, "prod-a", replicate.Selection{All: true})
	require.NoError(t, err)
	require.Zero(t, rep.Count(replicate.NotCopied))
	require.Equal(t, len(entries)-1, rep.Count(replicate.Copied), "all but the fanned-out segment")

	policy := retention.KeepLast(1)
	window := retention.PointInTime(2 * time.Second)
	pruner := &retention.Pruner{Store: target, Destination: "vault", Policy: policy, Scope: replicate.IsCopy,
		Chains: &window, ClockSkew: 50 * time.Millisecond}
	// Wait, by the target's clock, until the newest synthetic full
	// backup's copy is before the window: the plan then deletes every
	// copied segment that ends at or before it.
	before := 0
	for _, e := range entries {
		if e.Kind == backup.KindDelta && e.ID != first.ID && e.Manifest.LastRevision <= synthetic[1] {
			before++
		}
	}
	require.Eventually(t, func() bool {
		// A plan ages by the store's clock, the newest object it lists:
		// an object written there stands for the copies that come later.
		require.NoError(t, target.Put(ctx, backup.ClusterPrefix("prod-a")+"clock", strings.NewReader("tick"), nil))
		dry := *pruner
		dry.DryRun = true
		r, err := dry.Prune(ctx, "prod-a")
		require.NoError(t, err)
		n := 0
		for _, d := range r.Plan.Deletes() {
			if d.Entry.Kind == backup.KindDelta {
				n++
			}
		}
		return n == before
	}, 30*time.Second, 100*time.Millisecond, "the newest synthetic full backup bases the window")
	pruned, err := pruner.Prune(ctx, "prod-a")
	require.NoError(t, err)
	deletedSegments := 0
	for _, it := range pruned.Items {
		if it.Outcome != retention.Deleted {
			continue
		}
		require.NotEqual(t, first.ID, it.Entry.ID)
		if it.Entry.Manifest != nil {
			require.True(t, replicate.IsCopy(it.Entry.Manifest), "deleted %s, not a copy", it.Entry.ID)
		}
		if it.Entry.Kind == backup.KindDelta {
			deletedSegments++
			require.LessOrEqual(t, it.Entry.Manifest.LastRevision, synthetic[1], "segment %s is in the window", it.Entry.ID)
		}
	}
	require.Positive(t, deletedSegments)

	left, err := backup.ListBackups(ctx, target, "prod-a")
	require.NoError(t, err)
	has := map[string]bool{}
	for _, e := range left {
		has[e.ID] = true
		if e.Kind == backup.KindDelta && e.ID != first.ID {
			require.Greater(t, e.Manifest.LastRevision, synthetic[1], "copied segment %s before the base is left", e.ID)
		}
	}
	require.True(t, has[first.ID], "the fanned-out segment is kept")
	require.True(t, has[chainFull.ID], "the full backup the fanned-out segment restores on is kept")

	vault := []restore.Source{{Name: "vault", Catalog: target}}
	for rev := synthetic[1]; rev <= last; rev++ {
		_, err := restore.FindPoint(ctx, vault, restore.Point{Cluster: "prod-a", Revision: rev})
		require.NoError(t, err, "revision %d of the window", rev)
	}
	for _, rev := range []int64{synthetic[1], revs[12], last} {
		requireRestoresFrom(t, c, vault, rev)
	}

	rep, err = copier.Copy(ctx, "prod-a", replicate.Selection{All: true, Retention: &policy, PointInTime: &window, ClockSkew: pruner.ClockSkew})
	require.NoError(t, err)
	require.Zero(t, rep.Count(replicate.Copied)+rep.Count(replicate.Resumed), "the window's deletions are copied back")
	require.Zero(t, rep.Count(replicate.NotCopied))
	for _, ch := range rep.Chains {
		require.True(t, ch.Whole, "chain %s", ch.Full)
		require.Equal(t, last, ch.Through)
	}
}
