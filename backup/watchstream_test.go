package backup

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
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

// eventsSeen is a gRPC stream interceptor that closes seen once a watch
// stream received a response with events.
func eventsSeen(seen chan struct{}) grpc.StreamClientInterceptor {
	var once sync.Once
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || method != "/etcdserverpb.Watch/Watch" {
			return s, err
		}
		return recvHook{s, func(m any) {
			if wr, ok := m.(*etcdserverpb.WatchResponse); ok && len(wr.Events) > 0 {
				once.Do(func() { close(seen) })
			}
		}}, nil
	}
}

type recvHook struct {
	grpc.ClientStream
	fn func(any)
}

func (h recvHook) RecvMsg(m any) error {
	err := h.ClientStream.RecvMsg(m)
	if err == nil {
		h.fn(m)
	}
	return err
}

// TestFollowerStoresWhatItHoldsWhenTheWatchBreaks: when the watch's
// stream breaks (etcd stopped), the revisions the follower holds are
// stored at once, not once etcd answers again (or after the flush
// interval, here an hour).
func TestFollowerStoresWhatItHoldsWhenTheWatchBreaks(t *testing.T) {
	etcd := etcdtest.Start(t)
	seen := make(chan struct{})
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(eventsSeen(seen))}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	b, err := blob.Open(t.Context(), drivers.NewURLMux(nil), "mem://", nil)
	require.NoError(t, err)
	defer b.Close()
	snapshotter, err := NewEtcdSnapshotter(EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	var mu sync.Mutex
	var committed int64
	started := make(chan struct{})
	f := &Follower{Client: cli, Pipeline: &Pipeline{Snapshotter: snapshotter}, Cluster: "prod",
		Targets:  []Target{{Destination: "mem", Uploader: &BucketUploader{Bucket: b}}},
		Catalogs: []Catalog{b}, FlushInterval: time.Hour, RetryInterval: time.Hour,
		Observer: FollowObserverFunc(func(e FollowEvent) {
			mu.Lock()
			defer mu.Unlock()
			switch e.Kind {
			case ChainStarted:
				close(started)
			case SegmentCommitted:
				committed = max(committed, e.Committed)
			}
		})}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no chain started")
	}
	resp, err := cli.Put(t.Context(), "/k", "v")
	require.NoError(t, err)
	select {
	case <-seen: // the follower receives it before the stream's end
	case <-time.After(30 * time.Second):
		t.Fatal("the watch delivered nothing")
	}
	etcd.Stop()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return committed >= resp.Header.Revision
	}, 60*time.Second, 20*time.Millisecond, "revision %d not stored after the watch broke", resp.Header.Revision)
}
