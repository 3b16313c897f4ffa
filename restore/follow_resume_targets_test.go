package restore_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage"
)

// destinationsFollower returns a follower of etcd to the named buckets of
// bs, each its own destination and catalog.
func destinationsFollower(t *testing.T, etcd *etcdtest.Server, rec backup.FollowObserver, bs map[string]storage.Bucket, order ...string) *backup.Follower {
	t.Helper()
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	f := &backup.Follower{Client: etcd.Client(t), Pipeline: &backup.Pipeline{Snapshotter: snapshotter}, Cluster: "prod-a",
		FlushInterval: 100 * time.Millisecond, RetryInterval: 50 * time.Millisecond, Observer: rec}
	for _, n := range order {
		f.Targets = append(f.Targets, backup.Target{Destination: n, Uploader: &backup.BucketUploader{Bucket: bs[n]}})
		f.Catalogs = append(f.Catalogs, bs[n])
	}
	return f
}

// putsPast writes keys under prefix until etcd's revision reaches rev, and
// returns the last revision.
func putsPast(t *testing.T, cli *clientv3.Client, prefix string, rev int64) int64 {
	t.Helper()
	var last int64
	for i := 0; last < rev; i++ {
		resp, err := cli.Put(t.Context(), fmt.Sprintf("%s/%03d", prefix, i), "v")
		require.NoError(t, err)
		last = resp.Header.Revision
	}
	return last
}

// TestFollowerResumeChecksEveryDestinationsHistory: west holds a chain of
// an old cluster (the one a restore replaced), east a shorter chain of the
// new one. A follower of the new cluster to both resumes east's chain and
// starts a chain of its own on west: west's old chain is another history,
// and its revisions past the old chain's end restore the new cluster.
func TestFollowerResumeChecksEveryDestinationsHistory(t *testing.T) {
	east, west := memBucket(t), memBucket(t)
	bs := map[string]storage.Bucket{"east": east, "west": west}

	etcd1 := etcdtest.Start(t)
	rec := &followEvents{}
	stop := runFollower(t, destinationsFollower(t, etcd1, rec, bs, "west"))
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	old := workload(t, etcd1.Client(t), "/old", 30)
	r1 := old[len(old)-1]
	waitCommitted(t, rec, r1)
	require.NoError(t, stop())
	etcd1.Stop()

	etcd2 := etcdtest.Start(t)
	cli2 := etcd2.Client(t)
	rec = &followEvents{}
	stop = runFollower(t, destinationsFollower(t, etcd2, rec, bs, "east"))
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	nw := workload(t, cli2, "/new", 6)
	r2 := nw[len(nw)-1]
	waitCommitted(t, rec, r2)
	require.NoError(t, stop())
	require.Less(t, r2, r1)

	rec = &followEvents{}
	stop = runFollower(t, destinationsFollower(t, etcd2, rec, bs, "east", "west"))
	last := putsPast(t, cli2, "/fresh", r1+8)
	resp, err := cli2.Get(t.Context(), "/fresh", clientv3.WithCountOnly())
	require.NoError(t, err)
	newID := strconv.FormatUint(resp.Header.ClusterId, 16)
	var plan *restore.PointPlan
	require.Eventually(t, func() bool {
		plan, err = restore.FindPoint(t.Context(), []restore.Source{{Name: "west", Catalog: west}}, restore.Point{Cluster: "prod-a", Revision: last})
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "west reaches revision %d: %v", last, err)
	require.NoError(t, stop())
	require.Equal(t, newID, plan.Full.Manifest.Etcd.ClusterID, "west's plan starts from the new cluster's full backup")
	require.Equal(t, 1, rec.count(backup.ChainResumed), "east's chain goes on")

	restored, res, srv := restorePoint(t, west, restore.Point{Cluster: "prod-a", Revision: last})
	defer srv.Stop()
	require.Equal(t, last, res.Revision)
	requireSameAt(t, cli2, restored, last)
}

// TestFollowerLaggingDestinationKeepsOthersChains: west is behind (it was
// unreachable while east went on) and etcd compacted past west's point. A
// restarted follower goes on with east's chain from the earliest revision
// etcd still has, and west alone starts a chain of its own (TargetLost).
func TestFollowerLaggingDestinationKeepsOthersChains(t *testing.T) {
	east, west := memBucket(t), memBucket(t)
	bs := map[string]storage.Bucket{"east": east, "west": west}
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)

	rec := &followEvents{}
	stop := runFollower(t, destinationsFollower(t, etcd, rec, bs, "east", "west"))
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	a := workload(t, cli, "/a", 12)
	require.Eventually(t, func() bool {
		c := chains(t, west, "prod-a")
		for _, segs := range c {
			if len(segs) > 0 && segs[len(segs)-1][1] >= a[len(a)-1] {
				return true
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, stop())

	// west is unreachable for a while: a follower of east alone stands for it.
	rec = &followEvents{}
	stop = runFollower(t, destinationsFollower(t, etcd, rec, bs, "east"))
	b := workload(t, cli, "/b", 12)
	eastEnd := b[len(b)-1]
	waitCommitted(t, rec, eastEnd)
	require.NoError(t, stop())
	_, err := cli.Compact(t.Context(), eastEnd)
	require.NoError(t, err)
	eastChains := chains(t, east, "prod-a")
	require.Len(t, eastChains, 1)

	rec = &followEvents{}
	stop = runFollower(t, destinationsFollower(t, etcd, rec, bs, "east", "west"))
	c := workload(t, cli, "/c", 6)
	end := c[len(c)-1]
	waitCommitted(t, rec, end)
	require.Eventually(t, func() bool {
		_, err := restore.FindPoint(t.Context(), []restore.Source{{Name: "west", Catalog: west}}, restore.Point{Cluster: "prod-a", Revision: end})
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "west starts a chain of its own and reaches revision %d", end)
	require.NoError(t, stop())
	require.Zero(t, rec.count(backup.ChainGap), "east lacked nothing: its chain goes on")
	require.Equal(t, 1, rec.count(backup.ChainResumed))
	require.Positive(t, rec.count(backup.TargetLost))
	after := chains(t, east, "prod-a")
	require.Len(t, after, 1, "east keeps its chain")
	for id, segs := range after {
		require.Contains(t, eastChains, id)
		require.GreaterOrEqual(t, segs[len(segs)-1][1], end)
	}
	restored, res, srv := restorePoint(t, east, restore.Point{Cluster: "prod-a", Revision: end})
	defer srv.Stop()
	require.Equal(t, end, res.Revision)
	requireSameAt(t, cli, restored, end)
}

// TestFollowerDestinationAddedStartsItsOwnChain: a destination added to a
// follower that resumes holds no chain: it starts one of its own, and the
// others' chain goes on.
func TestFollowerDestinationAddedStartsItsOwnChain(t *testing.T) {
	east, west := memBucket(t), memBucket(t)
	bs := map[string]storage.Bucket{"east": east, "west": west}
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)

	rec := &followEvents{}
	stop := runFollower(t, destinationsFollower(t, etcd, rec, bs, "east"))
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	a := workload(t, cli, "/a", 6)
	waitCommitted(t, rec, a[len(a)-1])
	require.NoError(t, stop())
	eastChains := chains(t, east, "prod-a")
	require.Len(t, eastChains, 1)

	rec = &followEvents{}
	stop = runFollower(t, destinationsFollower(t, etcd, rec, bs, "east", "west"))
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted)+rec.count(backup.ChainResumed) > 0 }, 30*time.Second, 10*time.Millisecond)
	b := workload(t, cli, "/b", 6)
	end := b[len(b)-1]
	waitCommitted(t, rec, end)
	require.Eventually(t, func() bool {
		_, err := restore.FindPoint(t.Context(), []restore.Source{{Name: "west", Catalog: west}}, restore.Point{Cluster: "prod-a", Revision: end})
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "west starts a chain of its own and reaches revision %d", end)
	require.NoError(t, stop())
	require.Equal(t, 1, rec.count(backup.ChainResumed), "east's chain goes on")
	require.Zero(t, rec.count(backup.ChainStarted))
	require.Equal(t, 1, rec.count(backup.TargetRestarted))
	after := chains(t, east, "prod-a")
	require.Len(t, after, 1, "east keeps its chain")
	for id := range after {
		require.Contains(t, eastChains, id)
	}
}
