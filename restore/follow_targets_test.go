package restore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/faultproxy"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// lastHeld returns the last revision of the segments of prod-a on b (0 when
// there are none); chains checks that no chain has a gap or a double.
func lastHeld(t *testing.T, b storage.Bucket) int64 {
	t.Helper()
	var last int64
	for _, segs := range chains(t, b, "prod-a") {
		last = max(last, segs[len(segs)-1][1])
	}
	return last
}

// waitHeld waits until b holds segments up to rev.
func waitHeld(t *testing.T, b storage.Bucket, rev int64, msg string) {
	t.Helper()
	require.Eventually(t, func() bool { return lastHeld(t, b) >= rev }, 30*time.Second, 50*time.Millisecond, msg)
}

// TestFollowerDeadSecondDestination follows into two MinIO buckets, the
// second behind a proxy that then answers every request with AccessDenied
// (a revoked credential): the first destination's chain keeps committing
// segments while the second is dead. When the second answers again, it
// catches up: from the follower's backlog when that still holds what it
// lacks, else with a full backup of its own that starts a new chain there.
// A restore from each destination alone gives exactly etcd's state at
// every revision it holds, and a revision the second lost is a gap there,
// never a state with a hole.
func TestFollowerDeadSecondDestination(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backlog int
	}{
		{"from the backlog", 0},
		{"with a full backup", 1},
	} {
		t.Run(tc.name, func(t *testing.T) { testDeadSecondDestination(t, tc.backlog) })
	}
}

func testDeadSecondDestination(t *testing.T, backlog int) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	srv := miniotest.Start(t)
	east := newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{}))
	westName := srv.NewBucket(t, miniotest.BucketOptions{})
	west := newS3(t, srv, westName)
	proxy := faultproxy.StartHTTP(t, srv.Endpoint())
	opts := srv.S3Options(westName)
	opts.Endpoint, opts.PartSize, opts.PartsInFlight = proxy.Addr(), 5<<20, 2
	westProxied, err := s3.New(opts)
	require.NoError(t, err)
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	rec := &followEvents{}
	f := &backup.Follower{
		Client:   cli,
		Pipeline: &backup.Pipeline{Snapshotter: snapshotter, Compression: backup.Zstd},
		Cluster:  "prod-a",
		Targets: []backup.Target{
			{Destination: "east", Uploader: &backup.BucketUploader{Bucket: east}},
			{Destination: "west", Uploader: &backup.BucketUploader{Bucket: westProxied}},
		},
		Catalogs:        []backup.Catalog{east, westProxied},
		FlushInterval:   100 * time.Millisecond,
		RetryInterval:   50 * time.Millisecond,
		MaxBacklogBytes: backlog,
		MaxSegmentBytes: 1024, // the outage spans several segments
		Observer:        rec,
	}
	stop := runFollower(t, f)
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	before := workload(t, cli, "/before", 12)
	waitHeld(t, east, before[len(before)-1], "east holds what was written before the outage")
	waitHeld(t, west, before[len(before)-1], "west holds what was written before the outage")

	proxy.SetRules(faultproxy.Rule{Name: "revoked", Action: faultproxy.AccessDenied})
	during := workload(t, cli, "/during", 24)
	waitHeld(t, east, during[len(during)-1], "east's chain goes on while west is dead")
	require.Less(t, lastHeld(t, west), during[0], "west was dead")
	// West's worker fails on its own: east may have stored everything
	// before west's first answer came back.
	require.Eventually(t, func() bool { return rec.count(backup.TargetBehind) > 0 }, 30*time.Second, 10*time.Millisecond,
		"west is reported behind")

	proxy.SetRules()
	t.Cleanup(func() {
		if t.Failed() {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for _, e := range rec.events {
				if e.Kind != backup.SegmentCommitted {
					t.Logf("%s %s %d %v", e.Kind, e.Destination, e.Revision, e.Err)
				}
			}
		}
	})
	if backlog > 0 {
		// Its backlog lost what it lacks: a full backup of its own, with no
		// write meanwhile (the backlog holds one segment).
		require.Eventually(t, func() bool { return rec.count(backup.TargetRestarted) > 0 }, 30*time.Second, 10*time.Millisecond)
	}
	after := workload(t, cli, "/after", 12)
	last := after[len(after)-1]
	waitHeld(t, east, last, "east holds everything")
	waitHeld(t, west, last, "west caught up")
	require.Eventually(t, func() bool { return rec.count(backup.TargetCaughtUp) > 0 }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, stop())

	mid := during[len(during)/2]
	for _, c := range []struct {
		name string
		b    storage.Bucket
		revs []int64
	}{
		{"east", east, []int64{before[len(before)-1], mid, last}},
		{"west", west, []int64{before[len(before)-1], mid, last}},
	} {
		for _, rev := range c.revs {
			if c.name == "west" && rev == mid && backlog > 0 {
				_, err := restore.FindPoint(t.Context(), []restore.Source{{Name: c.name, Catalog: c.b}},
					restore.Point{Cluster: "prod-a", Revision: rev})
				require.True(t, errors.Is(err, restore.ErrNoChain), "west lost revision %d: a gap, not an older state: %v", rev, err)
				continue
			}
			restored, res, srv2 := restorePoint(t, c.b, restore.Point{Cluster: "prod-a", Revision: rev})
			require.Equal(t, rev, res.Revision, "%s at %d", c.name, rev)
			requireSameAt(t, cli, restored, rev)
			srv2.Stop()
		}
	}
	if backlog == 0 {
		require.Len(t, chains(t, west, "prod-a"), 1, "west continued its chain from the backlog")
	} else {
		require.Len(t, chains(t, west, "prod-a"), 2, "west started a new chain after its own full backup")
	}
}

// TestFollowerStartsWithADeadDestination starts a follower whose second
// destination refuses everything: the first full backup reaches only the
// first, whose chain goes on; when the second answers, it takes a full
// backup of its own and its chain restores exactly.
func TestFollowerStartsWithADeadDestination(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	srv := miniotest.Start(t)
	east := newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{}))
	westName := srv.NewBucket(t, miniotest.BucketOptions{})
	west := newS3(t, srv, westName)
	proxy := faultproxy.StartHTTP(t, srv.Endpoint(), faultproxy.Rule{Name: "revoked", Action: faultproxy.AccessDenied})
	opts := srv.S3Options(westName)
	opts.Endpoint = proxy.Addr()
	westProxied, err := s3.New(opts)
	require.NoError(t, err)
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	rec := &followEvents{}
	stop := runFollower(t, &backup.Follower{
		Client: cli, Pipeline: &backup.Pipeline{Snapshotter: snapshotter}, Cluster: "prod-a",
		Targets: []backup.Target{
			{Destination: "east", Uploader: &backup.BucketUploader{Bucket: east}},
			{Destination: "west", Uploader: &backup.BucketUploader{Bucket: westProxied}},
		},
		Catalogs:      []backup.Catalog{east, westProxied},
		FlushInterval: 100 * time.Millisecond, RetryInterval: 50 * time.Millisecond, Observer: rec,
	})
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	first := workload(t, cli, "/first", 12)
	waitHeld(t, east, first[len(first)-1], "east's chain goes on")
	require.Positive(t, rec.count(backup.TargetLost), "west is reported lost")

	proxy.SetRules()
	require.Eventually(t, func() bool { return rec.count(backup.TargetRestarted) > 0 }, 30*time.Second, 10*time.Millisecond)
	second := workload(t, cli, "/second", 12)
	last := second[len(second)-1]
	waitHeld(t, east, last, "east holds everything")
	waitHeld(t, west, last, "west caught up")
	require.NoError(t, stop())
	for _, b := range []storage.Bucket{east, west} {
		restored, res, srv2 := restorePoint(t, b, restore.Point{Cluster: "prod-a", Revision: last})
		require.Equal(t, last, res.Revision)
		requireSameAt(t, cli, restored, last)
		srv2.Stop()
	}
}

// TestFollowerCompactionWithADeadDestination: etcd compacts past a stopped
// follower's position while its second destination refuses everything.
// The restarted follower reports the gap and starts a new chain with a
// full backup that reaches the first destination, instead of failing on
// the catalog it cannot list.
func TestFollowerCompactionWithADeadDestination(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	srv := miniotest.Start(t)
	east := newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{}))
	westName := srv.NewBucket(t, miniotest.BucketOptions{})
	proxy := faultproxy.StartHTTP(t, srv.Endpoint())
	opts := srv.S3Options(westName)
	opts.Endpoint = proxy.Addr()
	westProxied, err := s3.New(opts)
	require.NoError(t, err)
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	follower := func(rec *followEvents) *backup.Follower {
		return &backup.Follower{
			Client: cli, Pipeline: &backup.Pipeline{Snapshotter: snapshotter}, Cluster: "prod-a",
			Targets: []backup.Target{
				{Destination: "east", Uploader: &backup.BucketUploader{Bucket: east}},
				{Destination: "west", Uploader: &backup.BucketUploader{Bucket: westProxied}},
			},
			Catalogs:      []backup.Catalog{east, westProxied},
			FlushInterval: 100 * time.Millisecond, RetryInterval: 50 * time.Millisecond, Observer: rec,
		}
	}
	rec := &followEvents{}
	stop := runFollower(t, follower(rec))
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	first := workload(t, cli, "/first", 12)
	waitHeld(t, east, first[len(first)-1], "east holds the first chain")
	require.NoError(t, stop())

	gap := workload(t, cli, "/gap", 12)
	_, err = cli.Compact(t.Context(), gap[len(gap)-1])
	require.NoError(t, err)
	proxy.SetRules(faultproxy.Rule{Name: "revoked", Action: faultproxy.AccessDenied})
	rec = &followEvents{}
	stop = runFollower(t, follower(rec))
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond,
		"a new chain starts on east")
	require.Equal(t, 1, rec.count(backup.ChainGap))
	second := workload(t, cli, "/second", 12)
	last := second[len(second)-1]
	waitHeld(t, east, last, "east's new chain goes on")
	require.NoError(t, stop())
	require.Len(t, chains(t, east, "prod-a"), 2)
	restored, res, srv2 := restorePoint(t, east, restore.Point{Cluster: "prod-a", Revision: last})
	require.Equal(t, last, res.Revision)
	requireSameAt(t, cli, restored, last)
	srv2.Stop()
}
