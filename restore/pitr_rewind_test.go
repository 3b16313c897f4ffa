package restore_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/restore"
)

// TestFollowerAfterRewind: a cluster is restored to an earlier revision
// without a bump, written to, and followed again with the same bucket.
// The follower starts a new chain from a new full backup, and a revision
// past the old chain's end restores exactly the new history, not the old
// revisions followed by the new ones.
func TestFollowerAfterRewind(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	b := memBucket(t)
	rec := &followEvents{}
	stop := startFollower(t, cli, etcd.Endpoints(), b, "prod-a", rec)
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	old := workload(t, cli, "/old", 30)
	oldLast := old[len(old)-1]
	waitCommitted(t, rec, oldLast)
	require.NoError(t, stop())
	etcd.Stop()

	back := old[10]
	rewound, _, srv := restorePoint(t, b, restore.Point{Cluster: "prod-a", Revision: back})
	for i := range 5 {
		_, err := rewound.Put(t.Context(), fmt.Sprintf("/new/before/%d", i), "n")
		require.NoError(t, err)
	}
	rec2 := &followEvents{}
	stop = startFollower(t, rewound, srv.Endpoints(), b, "prod-a", rec2)
	require.Eventually(t, func() bool { return rec2.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond,
		"a new chain after the rewind")
	require.Equal(t, 1, rec2.count(backup.ChainRewound))
	var last int64
	for i := 0; last < oldLast+20; i++ {
		resp, err := rewound.Put(t.Context(), fmt.Sprintf("/new/k%d", i%7), fmt.Sprintf("v%d", i))
		require.NoError(t, err)
		last = resp.Header.Revision
	}
	waitCommitted(t, rec2, last)
	require.NoError(t, stop())

	for _, rev := range []int64{oldLast + 5, last} {
		restored, res, srv2 := restorePoint(t, b, restore.Point{Cluster: "prod-a", Revision: rev})
		require.Equal(t, rev, res.Revision)
		requireSameAt(t, rewound, restored, rev)
		srv2.Stop()
	}
	restored, res, srv2 := restorePoint(t, b, restore.Point{Cluster: "prod-a", Time: time.Now()})
	require.Equal(t, last, res.Revision, "the newest time is the new history's end")
	requireSameAt(t, rewound, restored, last)
	srv2.Stop()
}

// TestRestorePointBump restores a point with a revision bump: the member
// serves the point's keys at the bumped revision, and the revisions
// before it are compacted, as etcdutl's --bump-revision --mark-compacted.
func TestRestorePointBump(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	b := memBucket(t)
	rec := &followEvents{}
	stop := startFollower(t, cli, etcd.Endpoints(), b, "prod-a", rec)
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	revs := workload(t, cli, "/a", 18)
	waitCommitted(t, rec, revs[len(revs)-1])
	require.NoError(t, stop())

	rev := revs[9]
	want, err := cli.Get(t.Context(), "", clientv3.WithPrefix(), clientv3.WithRev(rev))
	require.NoError(t, err)
	plan, err := restore.FindPoint(t.Context(), []restore.Source{{Name: "mem", Catalog: b}}, restore.Point{Cluster: "prod-a", Revision: rev})
	require.NoError(t, err)
	dataDir := filepath.Join(t.TempDir(), "bumped.etcd")
	res, err := (&restore.Restorer{}).RestorePoint(t.Context(), plan,
		restore.Member{Name: "bumped", DataDir: dataDir, PeerURLs: []string{"http://127.0.0.1:2380"}, RevisionBump: 1000})
	require.NoError(t, err)
	require.Equal(t, rev, res.Revision)
	require.Equal(t, int64(1000), res.RevisionBump)
	srv := etcdtest.Start(t, etcdtest.WithDataDir(dataDir), etcdtest.WithName("bumped"))
	bumped := srv.Client(t)
	got, err := bumped.Get(t.Context(), "", clientv3.WithPrefix())
	require.NoError(t, err)
	require.Equal(t, rev+1000, got.Header.Revision)
	require.Equal(t, len(want.Kvs), len(got.Kvs))
	for i := range want.Kvs {
		require.Equal(t, want.Kvs[i].String(), got.Kvs[i].String())
	}
	_, err = bumped.Get(t.Context(), "", clientv3.WithPrefix(), clientv3.WithRev(rev))
	require.ErrorIs(t, err, rpctypes.ErrCompacted, "revisions before the bump are compacted")
	put, err := bumped.Put(t.Context(), "/after", "x")
	require.NoError(t, err)
	require.Equal(t, rev+1001, put.Header.Revision)
}
