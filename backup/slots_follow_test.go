package backup

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
)

// watchWhileHeld is a gRPC stream interceptor that records the watches
// opened while held is set.
func watchWhileHeld(held, opened *atomic.Bool) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if method == "/etcdserverpb.Watch/Watch" && held.Load() {
			opened.Store(true)
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
}

// TestFollowerWaitsForASlotWithoutAWatch: a follower whose first full
// backup waits for a run slot opens no watch meanwhile (what etcd writes
// then is in the snapshot, and each waiting follower's watch would hold up
// to maxHeldBytes); once it has the slot it takes its full backup and
// starts its chain.
func TestFollowerWaitsForASlotWithoutAWatch(t *testing.T) {
	ctx := t.Context()
	etcd := etcdtest.Start(t)
	var held, opened atomic.Bool
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(watchWhileHeld(&held, &opened))}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	b, err := blob.Open(ctx, drivers.NewURLMux(nil), "mem://", nil)
	require.NoError(t, err)
	defer b.Close()
	snapshotter, err := NewEtcdSnapshotter(EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)

	slots := NewRunSlots(1)
	release, err := slots.take(ctx)
	require.NoError(t, err)
	held.Store(true)
	started := make(chan struct{})
	f := &Follower{
		Client:        cli,
		Pipeline:      &Pipeline{Snapshotter: snapshotter, Slots: slots},
		Cluster:       "prod",
		Targets:       []Target{{Destination: "mem", Uploader: &BucketUploader{Bucket: b}}},
		Catalogs:      []Catalog{b},
		FlushInterval: 20 * time.Millisecond,
		Observer: FollowObserverFunc(func(e FollowEvent) {
			if e.Kind == ChainStarted {
				close(started)
			}
		}),
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(fctx) }()
	defer func() { cancel(); <-done }()

	require.Eventually(t, func() bool { return slots.waiting.Load() == 1 }, 30*time.Second, time.Millisecond)
	_, err = cli.Put(ctx, "/k", "written while the follower waits")
	require.NoError(t, err)
	held.Store(false)
	release()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no chain started once the slot was free")
	}
	require.False(t, opened.Load(), "a watch opened while the follower waited for a slot")
}
