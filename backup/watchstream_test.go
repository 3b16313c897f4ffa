package backup

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// next receives the next response of ws, failing after a while.
func next(t *testing.T, ws *watchStream) (clientv3.WatchResponse, bool) {
	t.Helper()
	select {
	case wr, ok := <-ws.C:
		return wr, ok
	case <-time.After(30 * time.Second):
		t.Fatal("no watch response")
		return clientv3.WatchResponse{}, false
	}
}

// TestWatchStreamDelivers: a watch of every key delivers the created
// response when asked, then each revision from the start revision in
// order, and a progress notification with etcd's revision on request;
// the end of its context closes C with the context's error.
func TestWatchStreamDelivers(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	first, err := cli.Put(t.Context(), "/a", "1")
	require.NoError(t, err)
	_, err = cli.Put(t.Context(), "\x00low", "2") // the lowest keys are watched too
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ws, err := watchAll(ctx, cli, first.Header.Revision, true)
	require.NoError(t, err)
	wr, ok := next(t, ws)
	require.True(t, ok)
	assert.True(t, wr.Created, "the created response first")
	var got []string
	for len(got) < 2 {
		wr, ok := next(t, ws)
		require.True(t, ok)
		for _, ev := range wr.Events {
			got = append(got, string(ev.Kv.Key)+"@"+string(ev.Kv.Value))
		}
	}
	assert.Equal(t, []string{"/a@1", "\x00low@2"}, got)

	last, err := cli.Put(t.Context(), "/b", "3")
	require.NoError(t, err)
	wr, ok = next(t, ws)
	require.True(t, ok)
	require.Len(t, wr.Events, 1)
	require.NoError(t, ws.requestProgress())
	wr, ok = next(t, ws)
	require.True(t, ok)
	assert.True(t, wr.IsProgressNotify(), "%+v", wr)
	assert.Equal(t, last.Header.Revision, wr.Header.Revision)

	cancel()
	for ok {
		_, ok = next(t, ws)
	}
	require.ErrorIs(t, ws.Err(), context.Canceled)
}

// TestWatchStreamEnds: a watch from a compacted revision delivers the
// compaction, then ends with rpctypes.ErrCompacted; a watch without its
// created response asked for starts with the first revision; a watch
// whose etcd stops ends with an error, not a hang.
func TestWatchStreamEnds(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	var last int64
	for range 5 {
		r, err := cli.Put(t.Context(), "/k", "v")
		require.NoError(t, err)
		last = r.Header.Revision
	}
	_, err := cli.Compact(t.Context(), last)
	require.NoError(t, err)

	ws, err := watchAll(t.Context(), cli, 2, false)
	require.NoError(t, err)
	wr, ok := next(t, ws)
	require.True(t, ok)
	assert.Equal(t, last, wr.CompactRevision)
	_, ok = next(t, ws)
	require.False(t, ok)
	require.ErrorIs(t, ws.Err(), rpctypes.ErrCompacted)

	ws, err = watchAll(t.Context(), cli, last, false)
	require.NoError(t, err)
	wr, ok = next(t, ws)
	require.True(t, ok)
	assert.False(t, wr.Created)
	require.Len(t, wr.Events, 1)
	assert.Equal(t, last, wr.Events[0].Kv.ModRevision)

	etcd.Stop()
	for ok {
		_, ok = next(t, ws)
	}
	require.Error(t, ws.Err())
}

// TestFollowerNeedsAConnection: a follower whose client has no gRPC
// connection (clientv3.NewCtxClient's) fails at once, saying so, rather
// than retry a watch it cannot open.
func TestFollowerNeedsAConnection(t *testing.T) {
	cli := clientv3.NewCtxClient(t.Context())
	f := &Follower{Client: cli, Pipeline: &Pipeline{}, Cluster: "prod",
		Targets: []Target{{Destination: "d", Uploader: gateUploader{}}}, Catalogs: []Catalog{nil}}
	err := f.Run(t.Context())
	require.ErrorContains(t, err, "no gRPC connection")
}
