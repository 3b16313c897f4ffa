package restore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
)

// boundsSnapshotter records revision bounds for its snapshots; high zero
// is a snapshot whose revision could not be asked after the stream.
type boundsSnapshotter struct {
	s         backup.Snapshotter
	low, high int64
}

func (r boundsSnapshotter) Snapshot(ctx context.Context) (*backup.Snapshot, error) {
	snap, err := r.s.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	info := snap.Info()
	info.RevisionLow, info.RevisionHigh = r.low, r.high
	return backup.NewSnapshot(snap, info, nil), nil
}

// fullWithBounds stores a full backup of the test snapshot with the
// revision bounds low and high, created at at.
func fullWithBounds(t *testing.T, b storage.Bucket, at time.Time, low, high int64) string {
	t.Helper()
	snap := writeFile(t, "snapshot.db", gunzip(filepath.Join("testdata", "three-keys.db.gz")))
	p := &backup.Pipeline{Snapshotter: boundsSnapshotter{fileSnapshotter{snap}, low, high}, Now: func() time.Time { return at }}
	res, err := p.Run(t.Context(), backup.Request{Cluster: "prod-a", Name: "full", Scheduled: true,
		Targets: []backup.Target{{Destination: "d", Uploader: &backup.BucketUploader{Bucket: b}}}})
	require.NoError(t, err)
	return res.ID
}

// chainSegment stores a stand-in segment of chain.
func chainSegment(t *testing.T, b storage.Bucket, created time.Time, first, last int64, chain string) {
	t.Helper()
	m := &backup.Manifest{Format: backup.DeltaManifestFormat, Kind: backup.ManifestKindDelta, Cluster: "prod-a",
		Name: fmt.Sprintf("delta-%d", first), Created: created, Completed: created, Compression: backup.None,
		FirstRevision: first, LastRevision: last, Chain: chain,
		Raw: backup.Digest{Size: 4, SHA256: strings.Repeat("0", 64)}, Stored: backup.Digest{Size: 4, SHA256: strings.Repeat("0", 64)}}
	m.ID = backup.BackupID(m.Cluster, m.Name, created, true)
	m.DataKey = backup.DataKey(m.ID, created, backup.None, false)
	u := &backup.BucketUploader{Bucket: b}
	require.NoError(t, u.Upload(t.Context(), m, bytes.NewReader([]byte("none"))))
	require.NoError(t, u.Commit(t.Context(), m))
}

// TestFindPointTimeInGap: full at 10, segments to 40, a gap from 41 to 60,
// a full at 60. A time in the gap is refused with a *GapError naming the
// missing revisions; NearestEarlier plans revision 40 and says so. A time
// after the last segment, with nothing stored later, is the known end of
// history; with a source that could not be listed, it is not.
func TestFindPointTimeInGap(t *testing.T) {
	ctx := t.Context()
	b := memBucket(t)
	at := time.Date(2026, 11, 22, 2, 0, 0, 0, time.UTC)
	full10 := fullWithBounds(t, b, at, 10, 10)
	chainSegment(t, b, at.Add(3*time.Minute), 11, 40, full10)
	full60 := fullWithBounds(t, b, at.Add(60*time.Minute), 60, 60)
	chainSegment(t, b, at.Add(65*time.Minute), 61, 70, full60)
	sources := []restore.Source{{Name: "one", Catalog: b}}

	p := restore.Point{Cluster: "prod-a", Time: at.Add(50 * time.Minute)}
	_, err := restore.FindPoint(ctx, sources, p)
	var gap *restore.GapError
	require.ErrorAs(t, err, &gap, "a time in the gap: %v", err)
	require.ErrorIs(t, err, restore.ErrNoChain)
	require.Equal(t, [3]int64{41, 60, 40}, [3]int64{gap.From, gap.To, gap.Nearest}, "%v", err)

	p.NearestEarlier = true
	plan, err := restore.FindPoint(ctx, sources, p)
	require.NoError(t, err)
	require.Equal(t, full10, plan.Full.ID)
	require.Equal(t, [][2]int64{{11, 40}}, ranges(plan.Segments))
	require.NotNil(t, plan.Gap, "the plan says it is the nearest earlier point")
	require.Equal(t, int64(40), plan.Gap.Nearest)

	_, err = restore.FindPoint(ctx, sources, restore.Point{Cluster: "prod-a", Revision: 45})
	require.ErrorAs(t, err, &gap)
	require.Equal(t, [3]int64{41, 45, 40}, [3]int64{gap.From, gap.To, gap.Nearest}, "%v", err)
	plan, err = restore.FindPoint(ctx, sources, restore.Point{Cluster: "prod-a", Revision: 45, NearestEarlier: true})
	require.NoError(t, err)
	require.Equal(t, int64(40), plan.Revision, "the nearest earlier revision")
	require.Equal(t, int64(45), plan.Gap.Point.Revision)

	// After the last segment, nothing later is stored: the end of history.
	plan, err = restore.FindPoint(ctx, sources, restore.Point{Cluster: "prod-a", Time: at.Add(2 * time.Hour)})
	require.NoError(t, err)
	require.Equal(t, full60, plan.Full.ID)
	require.Nil(t, plan.Gap)

	// The same with a source that could not be listed: the segments after
	// the end may be there.
	broken := restore.Source{Name: "broken", Catalog: failingCatalog{errors.New("source down")}}
	_, err = restore.FindPoint(ctx, append(sources, broken),
		restore.Point{Cluster: "prod-a", Time: at.Add(2 * time.Hour), TolerateUnavailable: true})
	require.ErrorAs(t, err, &gap, "%v", err)
	require.True(t, gap.Unavailable)
	require.Equal(t, int64(71), gap.From)
}

// TestChainBaseSharedRule runs retention, restore and the follower's
// resume on the same entries: a full at 10 and its chain, then a full
// whose upper revision is unknown (the status call after the snapshot
// failed). It may base no chain: retention keeps the window's segments,
// every point inside the window restores, and a follower resumes the chain
// of the full at 10.
func TestChainBaseSharedRule(t *testing.T) {
	ctx := t.Context()
	b := memBucket(t)
	// Retention ages objects by the store's clock too: the entries end now.
	at := time.Now().UTC().Add(-80 * time.Minute).Truncate(time.Second)
	full10 := fullWithBounds(t, b, at, 10, 10)
	chainSegment(t, b, at.Add(5*time.Minute), 11, 40, full10)
	fullWithBounds(t, b, at.Add(40*time.Minute), 45, 0)
	chainSegment(t, b, at.Add(45*time.Minute), 41, 50, full10)
	chainSegment(t, b, at.Add(70*time.Minute), 51, 70, full10)
	now := at.Add(80 * time.Minute)

	pr := &retention.Pruner{Store: b, Policy: retention.KeepLast(5), Chains: &retention.ChainPolicy{Window: 30 * time.Minute},
		Now: func() time.Time { return now }}
	_, err := pr.Prune(ctx, "prod-a")
	require.NoError(t, err)

	sources := []restore.Source{{Name: "one", Catalog: b}}
	for _, p := range []restore.Point{
		{Cluster: "prod-a", Revision: 45}, {Cluster: "prod-a", Revision: 60},
		{Cluster: "prod-a", Time: at.Add(55 * time.Minute)},
	} {
		plan, err := restore.FindPoint(ctx, sources, p)
		require.NoError(t, err, "%s inside the window", p)
		require.Equal(t, full10, plan.Full.ID, "%s", p)
		require.NotEmpty(t, plan.Segments, "%s", p)
	}

	entries, err := backup.ListBackups(ctx, b, "prod-a")
	require.NoError(t, err)
	var bases []string
	for _, e := range entries {
		if e.ChainBase() {
			bases = append(bases, e.ID)
		}
	}
	require.Equal(t, []string{full10}, bases)
}

// unboundedFirst reports no upper revision for its first n snapshots, as
// when the status call after the stream fails.
type unboundedFirst struct {
	s backup.Snapshotter
	n *atomic.Int32
}

func (u unboundedFirst) Snapshot(ctx context.Context) (*backup.Snapshot, error) {
	snap, err := u.s.Snapshot(ctx)
	if err != nil || u.n.Add(-1) < 0 {
		return snap, err
	}
	return backup.NewSnapshot(snap, snap.Info(), func(info backup.SnapshotInfo) (backup.SnapshotInfo, error) {
		info.RevisionHigh = 0
		return info, nil
	}), nil
}

// TestFollowerUnboundedFull: the first full backup a follower takes has
// no known upper revision. It starts no chain; the follower takes another,
// and the chain it starts restores exactly. A snapshotter that never
// knows the revision ends Run with an error after a bounded number of
// full backups.
func TestFollowerUnboundedFull(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	b := memBucket(t)
	workload(t, cli, "/before", 6)
	follower := func(unbounded int32, rec backup.FollowObserver) *backup.Follower {
		snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
		require.NoError(t, err)
		n := &atomic.Int32{}
		n.Store(unbounded)
		return &backup.Follower{Client: cli, Pipeline: &backup.Pipeline{Snapshotter: unboundedFirst{snapshotter, n}},
			Cluster: "prod-a", Targets: []backup.Target{{Destination: "mem", Uploader: &backup.BucketUploader{Bucket: b}}},
			Catalogs: []backup.Catalog{b}, FlushInterval: 100 * time.Millisecond, RetryInterval: 50 * time.Millisecond, Observer: rec}
	}
	rec := &followEvents{}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- follower(1, rec).Run(ctx) }()
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	revs := workload(t, cli, "/after", 12)
	waitCommitted(t, rec, revs[len(revs)-1])
	cancel()
	require.NoError(t, <-done)

	entries, err := backup.ListBackups(t.Context(), b, "prod-a")
	require.NoError(t, err)
	fulls := 0
	for _, e := range entries {
		if e.Kind == backup.KindBackup {
			fulls++
			if e.Manifest.Etcd.Revision.High == 0 {
				require.NotEqual(t, rec.events[0].Chain, e.ID, "the unbounded full starts no chain")
			}
		}
	}
	require.Equal(t, 2, fulls, "an unbounded full, then one that starts the chain")
	rev := revs[len(revs)/2]
	restored, res, srv := restorePoint(t, b, restore.Point{Cluster: "prod-a", Revision: rev})
	require.Equal(t, rev, res.Revision)
	requireSameAt(t, cli, restored, rev)
	srv.Stop()

	b = memBucket(t)
	err = follower(100, &followEvents{}).Run(t.Context())
	require.ErrorContains(t, err, "without a known revision")
}
