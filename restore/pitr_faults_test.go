package restore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/internal/restoretest"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage"
)

// chains returns the cluster's chains on b: for each, the full backup's
// revision and the segments' revisions. It fails the test on an invalid
// entry (something half-visible) or on segments that overlap or leave a
// gap inside a chain.
func chains(t *testing.T, b storage.Bucket, cluster string) map[string][][2]int64 {
	t.Helper()
	entries, err := backup.ListBackups(t.Context(), b, cluster)
	require.NoError(t, err)
	out := map[string][][2]int64{}
	for _, e := range entries {
		require.NotEqual(t, backup.KindInvalid, e.Kind, "invalid entry %s: %v", e.Key, e.Problem)
		if e.Kind != backup.KindDelta {
			continue
		}
		m := e.Manifest
		segs := out[m.Chain]
		if n := len(segs); n > 0 {
			require.Equal(t, segs[n-1][1]+1, m.FirstRevision, "segment %s of chain %s: no gap, no double", e.ID, m.Chain)
		}
		out[m.Chain] = append(segs, [2]int64{m.FirstRevision, m.LastRevision})
	}
	return out
}

// writeFor writes a key every 20 ms for d, and returns the last revision.
func writeFor(t *testing.T, cli *clientv3.Client, prefix string, d time.Duration) int64 {
	t.Helper()
	var rev int64
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end); i++ {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		resp, err := cli.Put(ctx, fmt.Sprintf("%s/%d", prefix, i%50), fmt.Sprintf("v%d", i))
		cancel()
		if err == nil {
			rev = resp.Header.Revision
		}
		time.Sleep(20 * time.Millisecond)
	}
	return rev
}

// TestFollowerMinIOOutage stops MinIO for 10 s while writes go on: the
// follower retries, then catches up; the chain has no gap and no double,
// and the last revision restores.
func TestFollowerMinIOOutage(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	srv := miniotest.Start(t)
	bucket := newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{}))
	rec := &followEvents{}
	stop := startFollower(t, cli, etcd.Endpoints(), bucket, "prod-a", rec)
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)

	writeFor(t, cli, "/before", time.Second)
	srv.Stop(t)
	writeFor(t, cli, "/during", 10*time.Second)
	srv.Restart(t)
	last := writeFor(t, cli, "/after", time.Second)
	waitCommitted(t, rec, last)
	require.NoError(t, stop())
	require.Positive(t, rec.count(backup.SegmentFailed), "the outage was noticed")

	requireOneChainTo(t, bucket, cli, last)
}

// TestFollowerEtcdRestart restarts the etcd member (same data directory
// and ports) under a running follower: the watch resumes where it stopped.
func TestFollowerEtcdRestart(t *testing.T) {
	etcd := etcdtest.Start(t)
	cfg := etcd.Etcd().Config()
	srv := miniotest.Start(t)
	bucket := newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{}))
	rec := &followEvents{}
	// The follower's client outlives the member.
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer cli.Close()
	stop := startFollower(t, cli, etcd.Endpoints(), bucket, "prod-a", rec)
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)

	mid := writeFor(t, cli, "/before", time.Second)
	etcd.Stop()
	restarted, err := embed.StartEtcd(&cfg)
	require.NoError(t, err)
	defer restarted.Close()
	select {
	case <-restarted.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("restarted member not ready")
	}
	last := writeFor(t, cli, "/after", 2*time.Second)
	require.Greater(t, last, mid)
	waitCommitted(t, rec, last)
	require.NoError(t, stop())

	requireOneChainTo(t, bucket, cli, last)
}

// TestFollowerCompaction compacts etcd past a stopped follower's position:
// on restart it reports the gap, takes a new full backup and starts a new
// chain. Revisions in the gap fail to restore with ErrNoChain; those of
// both chains restore.
func TestFollowerCompaction(t *testing.T) {
	ctx := t.Context()
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	srv := miniotest.Start(t)
	bucket := newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{}))
	rec := &followEvents{}
	stop := startFollower(t, cli, etcd.Endpoints(), bucket, "prod-a", rec)
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	first := workload(t, cli, "/one", 24)
	waitCommitted(t, rec, first[len(first)-1])
	require.NoError(t, stop())

	firstLast := first[len(first)-1]
	wantFirst, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(firstLast))
	require.NoError(t, err)
	gap := workload(t, cli, "/gap", 12)
	_, err = cli.Compact(ctx, gap[len(gap)-1])
	require.NoError(t, err)

	rec2 := &followEvents{}
	metrics := backup.NewFollowerMetrics()
	stop = startFollower(t, cli, etcd.Endpoints(), bucket, "prod-a", backup.FollowObservers{rec2, metrics})
	require.Eventually(t, func() bool { return rec2.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, rec2.count(backup.ChainGap), "the gap is reported")
	require.NoError(t, testutil.CollectAndCompare(metrics, strings.NewReader(`
# HELP etcdbackup_follower_gaps_total Chains broken because etcd compacted revisions not yet read.
# TYPE etcdbackup_follower_gaps_total counter
etcdbackup_follower_gaps_total{cluster="prod-a"} 1
`), backup.MetricFollowerGaps), "and counted")
	second := workload(t, cli, "/two", 24)
	waitCommitted(t, rec2, second[len(second)-1])
	require.NoError(t, stop())

	c := chains(t, bucket, "prod-a")
	require.Len(t, c, 2, "a new chain after the gap")

	_, err = restore.FindPoint(ctx, []restore.Source{{Name: "minio", Catalog: bucket}}, restore.Point{Cluster: "prod-a", Revision: gap[0]})
	require.True(t, errors.Is(err, restore.ErrNoChain), "a revision in the gap: %v", err)
	restored, res, srv2 := restorePoint(t, bucket, restore.Point{Cluster: "prod-a", Revision: firstLast})
	require.Equal(t, firstLast, res.Revision)
	requireSame(t, wantFirst, restored, firstLast)
	srv2.Stop()
	rev := second[len(second)/2]
	restored, res, srv2 = restorePoint(t, bucket, restore.Point{Cluster: "prod-a", Revision: rev})
	require.Equal(t, rev, res.Revision)
	requireSameAt(t, cli, restored, rev)
	srv2.Stop()
}

// TestFollowerTwoTargets follows into two buckets at once: both hold the
// same chain, and either restores the last revision.
func TestFollowerTwoTargets(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	srv := miniotest.Start(t)
	east := newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{}))
	west := newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{}))
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	rec := &followEvents{}
	f := &backup.Follower{
		Client:   cli,
		Pipeline: &backup.Pipeline{Snapshotter: snapshotter, Compression: backup.Gzip},
		Cluster:  "prod-a",
		Targets: []backup.Target{
			{Destination: "east", Uploader: &backup.BucketUploader{Bucket: east}},
			{Destination: "west", Uploader: &backup.BucketUploader{Bucket: west}},
		},
		Catalogs:      []backup.Catalog{east, west},
		FlushInterval: 100 * time.Millisecond,
		Observer:      rec,
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	revs := workload(t, cli, "/w", 36)
	last := revs[len(revs)-1]
	waitCommitted(t, rec, last)
	cancel()
	require.NoError(t, <-done)

	ce, cw := chains(t, east, "prod-a"), chains(t, west, "prod-a")
	require.Len(t, ce, 1)
	require.Equal(t, ce, cw, "both targets hold the same chain")
	for _, b := range []storage.Bucket{east, west} {
		restored, res, srv2 := restorePoint(t, b, restore.Point{Cluster: "prod-a", Revision: last})
		require.Equal(t, last, res.Revision)
		requireSameAt(t, cli, restored, last)
		srv2.Stop()
	}
}

// TestPointInTimeCluster restores three members to one revision and starts
// them as a cluster: every member serves the source's keys at that
// revision.
func TestPointInTimeCluster(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	srv := miniotest.Start(t)
	bucket := newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{}))
	rec := &followEvents{}
	stop := startFollower(t, cli, etcd.Endpoints(), bucket, "prod-a", rec)
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	revs := workload(t, cli, "/w", 30)
	rev := revs[len(revs)/2]
	waitCommitted(t, rec, revs[len(revs)-1])
	require.NoError(t, stop())

	plan, err := restore.FindPoint(t.Context(), []restore.Source{{Name: "minio", Catalog: bucket}}, restore.Point{Cluster: "prod-a", Revision: rev})
	require.NoError(t, err)
	urls := restoretest.FreeURLs(t, 6)
	dir := t.TempDir()
	c := restore.Cluster{Token: "restored"}
	var members []restoretest.Member
	for i := range 3 {
		name := fmt.Sprintf("m%d", i)
		c.Members = append(c.Members, restore.ClusterMember{Name: name, DataDir: filepath.Join(dir, name), PeerURLs: []string{urls[2*i]}})
		members = append(members, restoretest.Member{Name: name, DataDir: filepath.Join(dir, name), PeerURL: urls[2*i], ClientURL: urls[2*i+1]})
	}
	res, err := (&restore.Restorer{}).RestoreClusterPoint(t.Context(), plan, c)
	require.NoError(t, err)
	require.Len(t, res, 3)
	for _, r := range res {
		require.Equal(t, rev, r.Revision)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 3, "no staging directory left")
	restoretest.StartMembers(t, members)
	for _, m := range members {
		requireSameAt(t, cli, restoretest.Client(t, m.ClientURL), rev)
	}
}

// TestFollowerCompactionUsesNewerFull compacts past a stopped follower's
// position after a scheduled full backup was taken: the restarted follower
// reports the gap and starts its new chain after that full backup instead
// of taking another.
func TestFollowerCompactionUsesNewerFull(t *testing.T) {
	ctx := t.Context()
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	srv := miniotest.Start(t)
	bucket := newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{}))
	rec := &followEvents{}
	stop := startFollower(t, cli, etcd.Endpoints(), bucket, "prod-a", rec)
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	first := workload(t, cli, "/one", 12)
	waitCommitted(t, rec, first[len(first)-1])
	require.NoError(t, stop())

	gap := workload(t, cli, "/gap", 12)
	_, err := cli.Compact(ctx, gap[len(gap)-1])
	require.NoError(t, err)
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	scheduled := runBackup(t, snapshotter, bucket, "prod-a", "hourly", backup.Zstd)

	rec2 := &followEvents{}
	stop = startFollower(t, cli, etcd.Endpoints(), bucket, "prod-a", rec2)
	require.Eventually(t, func() bool { return rec2.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, rec2.count(backup.ChainGap))
	second := workload(t, cli, "/two", 12)
	waitCommitted(t, rec2, second[len(second)-1])
	require.NoError(t, stop())

	entries, err := backup.ListBackups(ctx, bucket, "prod-a")
	require.NoError(t, err)
	fulls := 0
	for _, e := range entries {
		if e.Kind == backup.KindBackup {
			fulls++
		}
	}
	require.Equal(t, 2, fulls, "no full backup taken for the new chain")
	c := chains(t, bucket, "prod-a")
	require.Len(t, c, 2)
	require.Equal(t, scheduled.Etcd.Revision.Low+1, c[scheduled.ID][0][0], "the new chain starts after the scheduled full backup")
	rev := second[len(second)-1]
	restored, res, srv2 := restorePoint(t, bucket, restore.Point{Cluster: "prod-a", Revision: rev})
	defer srv2.Stop()
	require.Equal(t, rev, res.Revision)
	requireSameAt(t, cli, restored, rev)
}

// requireOneChainTo checks that prod-a has one chain on bucket, ending at
// last, and that restoring last gives exactly what etcd serves at it.
func requireOneChainTo(t *testing.T, bucket storage.Bucket, cli *clientv3.Client, last int64) {
	t.Helper()
	c := chains(t, bucket, "prod-a")
	require.Len(t, c, 1)
	for _, segs := range c {
		require.Equal(t, last, segs[len(segs)-1][1], "the chain ends at the last revision written")
	}
	restored, res, srv := restorePoint(t, bucket, restore.Point{Cluster: "prod-a", Revision: last})
	defer srv.Stop()
	require.Equal(t, last, res.Revision)
	requireSameAt(t, cli, restored, last)
}
