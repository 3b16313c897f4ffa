package restoretest_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	clientsnapshot "go.etcd.io/etcd/client/v3/snapshot"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/restoretest"
)

func TestFreeURLs(t *testing.T) {
	urls := restoretest.FreeURLs(t, 5)
	require.Len(t, urls, 5)
	seen := map[string]bool{}
	for _, u := range urls {
		require.Regexp(t, `^http://127\.0\.0\.1:\d+$`, u)
		seen[u] = true
	}
	require.Len(t, seen, 5)
}

// TestStartMembers restores a two-member cluster with etcdutl on URLs from
// FreeURLs and starts it.
func TestStartMembers(t *testing.T) {
	src := etcdtest.Start(t)
	_, err := src.Client(t).Put(t.Context(), "k", "v")
	require.NoError(t, err)
	snap := filepath.Join(t.TempDir(), "snap.db")
	_, err = clientsnapshot.SaveWithVersion(t.Context(), zap.NewNop(), clientv3.Config{Endpoints: src.Endpoints()}, snap)
	require.NoError(t, err)

	peers, clients := restoretest.FreeURLs(t, 2), restoretest.FreeURLs(t, 2)
	initial := "a=" + peers[0] + ",b=" + peers[1]
	var members []restoretest.Member
	for i, name := range []string{"a", "b"} {
		dir := filepath.Join(t.TempDir(), name)
		require.NoError(t, snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
			SnapshotPath: snap, Name: name, OutputDataDir: dir, PeerURLs: []string{peers[i]},
			InitialCluster: initial, InitialClusterToken: "t",
		}))
		members = append(members, restoretest.Member{Name: name, DataDir: dir, PeerURL: peers[i], ClientURL: clients[i]})
	}
	servers := restoretest.StartMembers(t, members)
	require.Len(t, servers, 2)
	for _, c := range clients {
		resp, err := restoretest.Client(t, c).Get(t.Context(), "k")
		require.NoError(t, err)
		require.Len(t, resp.Kvs, 1)
		require.Equal(t, "v", string(resp.Kvs[0].Value))
	}
}
