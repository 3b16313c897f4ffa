package backup

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// downUploader fails every upload.
type downUploader struct{}

func (downUploader) Upload(_ context.Context, _ *Manifest, r io.Reader) error {
	_, _ = io.Copy(io.Discard, r)
	return errors.New("down")
}

func (downUploader) Commit(context.Context, *Manifest) error { return errors.New("down") }

// TestFollowerTailTargetLostEndsTheWait: a recovery's tail is stored on
// x, and y, failing, loses a segment its backlog could not keep after x
// stored everything. The tail waits for y no more: awaitTailStored returns
// once y is lost, however late (it waited until Run ended).
func TestFollowerTailTargetLostEndsTheWait(t *testing.T) {
	f := &Follower{Cluster: "prod-a", Pipeline: &Pipeline{},
		Targets:         []Target{{Destination: "x", Uploader: delayUploader{}}, {Destination: "y", Uploader: downUploader{}}},
		MaxSegmentBytes: 1, MaxBacklogBytes: 1, SlowStore: time.Minute, RetryInterval: 100 * time.Millisecond}
	st := newTailState(t, f)
	for rev := int64(2); rev <= 3; rev++ {
		require.NoError(t, st.receive(t.Context(), clientv3.WatchResponse{Header: &etcdserverpb.ResponseHeader{ClusterId: 7, Revision: rev},
			Events: []*clientv3.Event{{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("/k"), Value: []byte("v"),
				CreateRevision: 2, ModRevision: rev, Version: rev - 1}}}}))
		_, err := st.flush(t.Context())
		require.NoError(t, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan bool, 1)
	go func() { done <- st.targets.awaitTailStored(ctx, time.Hour) }()
	select {
	case held := <-done:
		require.True(t, held, "x holds the tail")
	case <-time.After(30 * time.Second):
		t.Fatal("the tail still waits for y, which is lost")
	}
}

// TestFollowerTailWaitsForASlowTarget: in a recovery's tail, which reads
// etcd's history at its own pace, y never fails but stores slower than
// x. The tail waits for it before reading on: its backlog never passes
// MaxBacklogBytes, and it holds the whole tail (it was lost, and its old
// chain kept a hole for good, while RecoveryDone reported no error).
func TestFollowerTailWaitsForASlowTarget(t *testing.T) {
	var (
		mu   sync.Mutex
		lost []FollowEvent
	)
	f := &Follower{Cluster: "prod-a", Pipeline: &Pipeline{},
		Targets: []Target{{Destination: "x", Uploader: delayUploader{}},
			{Destination: "y", Uploader: delayUploader{100 * time.Millisecond}}},
		MaxSegmentBytes: 1, MaxBacklogBytes: 1, SlowStore: time.Minute, RetryInterval: 100 * time.Millisecond,
		Observer: FollowObserverFunc(func(e FollowEvent) {
			if e.Kind == TargetLost {
				mu.Lock()
				defer mu.Unlock()
				lost = append(lost, e)
			}
		})}
	st := newTailState(t, f)
	putAndFlush(t, st, 4)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.True(t, st.targets.awaitTailStored(ctx, time.Hour))
	y := st.targets.list[1]
	y.mu.Lock()
	yLost, yCommitted := y.lost, y.committed
	y.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	require.False(t, yLost, "a working, slower destination lost revisions of the tail: %v", lost)
	require.Equal(t, int64(4), yCommitted)
	require.Empty(t, lost)
	require.Empty(t, st.targets.lostWhileRunning())
}

// TestFollowerTailBoundsAFailingTarget: in a recovery's tail x stores
// every segment; y keeps failing (its backlog keeps what it lacks). The
// tail waits for y for the bound (FinalCommitTimeout), then y is lost for
// the tail (reported, and listed for RecoveryDone) and the tail goes on:
// it waited for y until Run ended.
func TestFollowerTailBoundsAFailingTarget(t *testing.T) {
	const bound = 300 * time.Millisecond
	var lost atomic.Int32
	f := &Follower{Cluster: "prod-a", Pipeline: &Pipeline{},
		Targets:         []Target{{Destination: "x", Uploader: delayUploader{}}, {Destination: "y", Uploader: downUploader{}}},
		MaxSegmentBytes: 1, SlowStore: time.Minute, RetryInterval: 10 * time.Millisecond, FinalCommitTimeout: bound,
		Observer: FollowObserverFunc(func(e FollowEvent) {
			if e.Kind == TargetLost && e.Destination == "y" {
				lost.Add(1)
			}
		})}
	st := newTailState(t, f)
	began := time.Now()
	putAndFlush(t, st, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.True(t, st.targets.awaitTailStored(ctx, bound), "x holds the tail")
	require.GreaterOrEqual(t, time.Since(began), bound, "y was waited for, failing, for the bound")
	require.NoError(t, ctx.Err())
	require.Equal(t, []string{"y"}, st.targets.lostWhileRunning())
	require.Equal(t, int32(1), lost.Load())
}
