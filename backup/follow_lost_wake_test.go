package backup

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// putAt is a watch response of cluster 7 holding a put of /k at rev,
// with header revision head.
func putAt(rev, head int64) clientv3.WatchResponse {
	return clientv3.WatchResponse{Header: &etcdserverpb.ResponseHeader{ClusterId: 7, Revision: head},
		Events: []*clientv3.Event{{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("/k"), Value: []byte("v"),
			CreateRevision: 2, ModRevision: rev, Version: rev - 1}}}}
}

// TestFollowerDrainedLostTargetWakesTheWait: y's worker runs late (a
// busy machine) and finds revisions 2 and 3 gone from its backlog: it is
// lost. awaitDrained (a follower stopping, a chain abandoned in a
// recovery) waits for no lost target, and must learn it then, not once
// y's own full backup was tried after its retry pace (here 20 s), nor at
// FinalCommitTimeout.
func TestFollowerDrainedLostTargetWakesTheWait(t *testing.T) {
	f := &Follower{Cluster: "prod-a", Pipeline: &Pipeline{},
		Targets:         []Target{{Destination: "x", Uploader: delayUploader{}}, {Destination: "y", Uploader: delayUploader{}}},
		MaxSegmentBytes: 1, MaxBacklogBytes: 1, SlowStore: time.Minute, RetryInterval: 20 * time.Second}
	codec, err := newSegmentCodec(f.Cluster, f.Pipeline)
	require.NoError(t, err)
	st := &followState{f: f, codec: codec, builder: newSegmentBuilder(), leases: map[int64]bool{}, chain: "prod-a-full"}
	all := f.newFollowTargets(2, "prod-a-full", nil)
	st.targets = all
	wctx, cancel := context.WithCancel(context.Background())
	all.cancel = cancel
	t.Cleanup(all.stop)
	x, y := all.list[0], all.list[1]
	all.wg.Go(func() { x.run(wctx, all) })
	st.restart(chainStart{next: 2, chain: "prod-a-full"})
	putAndFlush(t, st, 4)
	ctx, cancelWait := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancelWait()
	all.notify() // a token awaitDrained takes once it waits for y
	done := make(chan []string, 1)
	go func() { done <- all.awaitDrained(ctx) }()
	require.Eventually(t, func() bool { return len(all.changed) == 0 }, 30*time.Second, time.Millisecond)
	all.wg.Go(func() { y.run(wctx, all) })
	behind := <-done
	require.NoError(t, ctx.Err(), "awaitDrained waited for a lost target until its context ended")
	require.Equal(t, []string{"y"}, behind)
	y.mu.Lock()
	defer y.mu.Unlock()
	require.True(t, y.lost)
}
