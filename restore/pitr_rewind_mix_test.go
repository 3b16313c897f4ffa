package restore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/restore"
)

// After a rewind, a revision of the old history that the new chain has not
// reached yet is planned from the NEW chain's full plus the OLD chain's
// segments: a state that never existed.
func TestFindPointNeverMixesHistoriesAfterRewind(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	b := memBucket(t)
	rec := &followEvents{}
	stop := startFollower(t, cli, etcd.Endpoints(), b, "prod-a", rec)
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	var old []int64
	for i := range 30 {
		r, err := cli.Put(t.Context(), fmt.Sprintf("/old/k%02d", i), "o")
		require.NoError(t, err)
		old = append(old, r.Header.Revision)
	}
	oldLast := old[len(old)-1]
	waitCommitted(t, rec, oldLast)
	want, err := cli.Get(t.Context(), "", clientv3.WithPrefix(), clientv3.WithRev(oldLast))
	require.NoError(t, err)
	require.NoError(t, stop())
	etcd.Stop()

	back := old[10]
	rewound, _, rsrv := restorePoint(t, b, restore.Point{Cluster: "prod-a", Revision: back})
	srvEndpoints := rsrv.Endpoints()
	for i := range 5 {
		_, err := rewound.Put(t.Context(), fmt.Sprintf("/new/before/%d", i), "n")
		require.NoError(t, err)
	}
	rec2 := &followEvents{}
	stop = startFollower(t, rewound, srvEndpoints, b, "prod-a", rec2)
	require.Eventually(t, func() bool { return rec2.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	resp, err := rewound.Put(t.Context(), "/new/one", "x")
	require.NoError(t, err)
	waitCommitted(t, rec2, resp.Header.Revision)
	require.NoError(t, stop())
	t.Logf("back=%d newchain reaches %d oldLast=%d", back, resp.Header.Revision, oldLast)

	plan, err := restore.FindPoint(t.Context(), []restore.Source{{Name: "minio", Catalog: b}}, restore.Point{Cluster: "prod-a", Revision: oldLast})
	require.NoError(t, err)
	t.Logf("plan full %s rev %d..%d, %d segments, chains:", plan.Full.ID, plan.Full.Manifest.Etcd.Revision.Low, plan.Full.Manifest.Etcd.Revision.High, len(plan.Segments))
	for _, s := range plan.Segments {
		t.Logf("  segment %d..%d chain %s", s.Manifest.FirstRevision, s.Manifest.LastRevision, s.Manifest.Chain)
	}
	restored, _, _ := restorePoint(t, b, restore.Point{Cluster: "prod-a", Revision: oldLast})
	got, err := restored.Get(t.Context(), "/new/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	t.Logf("restored holds %d /new/ keys of the new history", got.Count)
	requireSame(t, want, restored, oldLast)
}
