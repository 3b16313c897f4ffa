package restore_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/restore"
)

// A cluster restored to an earlier revision keeps its cluster ID (same
// name, peer URL and token, as etcdutl restores usually do) and writes past
// the chain's end before the follower comes back: the follower finds that
// etcd no longer holds the chain's last put and starts a new chain, so a
// restore after that point gives exactly the new history.
func TestFollowerDetectsRewindWithSameClusterID(t *testing.T) {
	rewindWithSameClusterID(t, false)
}

// The same when the chain's last segment holds deletes only (a range
// delete after the last put, in a segment of its own): before, such a
// segment's manifest named no last put, the follower had nothing to ask
// etcd and resumed the chain with the other history.
func TestFollowerDetectsRewindAfterASegmentOfDeletes(t *testing.T) {
	rewindWithSameClusterID(t, true)
}

func rewindWithSameClusterID(t *testing.T, deletesLast bool) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	b := memBucket(t)
	rec := &followEvents{}
	stop := startFollower(t, cli, etcd.Endpoints(), b, "prod-a", rec)
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	old := workload(t, cli, "/old", 30)
	oldLast := old[len(old)-1]
	waitCommitted(t, rec, oldLast)
	if deletesLast {
		resp, err := cli.Delete(t.Context(), "/old/", clientv3.WithPrefix())
		require.NoError(t, err)
		require.NotZero(t, resp.Deleted)
		oldLast = resp.Header.Revision
		waitCommitted(t, rec, oldLast)
	}
	h, err := cli.Get(t.Context(), "x")
	require.NoError(t, err)
	oldID := h.Header.ClusterId
	require.NoError(t, stop())
	etcd.Stop()

	back := old[10]
	plan, err := restore.FindPoint(t.Context(), []restore.Source{{Name: "minio", Catalog: b}}, restore.Point{Cluster: "prod-a", Revision: back})
	require.NoError(t, err)
	dataDir := filepath.Join(t.TempDir(), "same.etcd")
	_, err = (&restore.Restorer{}).RestorePoint(t.Context(), plan, restore.Member{Name: "etcd0", DataDir: dataDir, PeerURLs: []string{etcd.PeerURL()}, ClusterToken: "etcdtest"})
	require.NoError(t, err)
	srv := etcdtest.Start(t, etcdtest.WithDataDir(dataDir))
	rewound := srv.Client(t)
	var last int64
	for i := 0; last < oldLast+3; i++ {
		resp, err := rewound.Put(t.Context(), fmt.Sprintf("/new/k%d", i), "n")
		require.NoError(t, err)
		last = resp.Header.Revision
		require.Equal(t, oldID, resp.Header.ClusterId, "same cluster ID")
	}
	rec2 := &followEvents{}
	stop = startFollower(t, rewound, srv.Endpoints(), b, "prod-a", rec2)
	require.Eventually(t, func() bool { return rec2.count(backup.ChainRewound) == 1 && rec2.count(backup.ChainStarted) == 1 },
		30*time.Second, 10*time.Millisecond, "the rewind was not detected: %s", rec2)
	resp, err := rewound.Put(t.Context(), "/new/after", "x")
	require.NoError(t, err)
	waitCommitted(t, rec2, resp.Header.Revision)
	require.NoError(t, stop())
	t.Logf("rewound events %d, started %d, resumed %d", rec2.count(backup.ChainRewound), rec2.count(backup.ChainStarted), rec2.count(backup.ChainResumed))
	restored, _, _ := restorePoint(t, b, restore.Point{Cluster: "prod-a", Revision: resp.Header.Revision})
	requireSameAt(t, rewound, restored, resp.Header.Revision)
}
