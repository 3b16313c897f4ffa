package backup

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// delayUploader stores nothing, each upload taking delay.
type delayUploader struct{ delay time.Duration }

func (u delayUploader) Upload(ctx context.Context, _ *Manifest, r io.Reader) error {
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(u.delay):
		return nil
	}
}

func (delayUploader) Commit(context.Context, *Manifest) error { return nil }

// drainState is the state of f following chain prod-a-full from revision
// 2, its targets running until the test ends.
func drainState(t *testing.T, f *Follower) *followState {
	t.Helper()
	codec, err := newSegmentCodec(f.Cluster, f.Pipeline)
	require.NoError(t, err)
	st := &followState{f: f, codec: codec, builder: newSegmentBuilder(), leases: map[int64]bool{}, chain: "prod-a-full"}
	st.targets = f.newFollowTargets(2, "prod-a-full", nil)
	st.targets.start(t.Context())
	t.Cleanup(st.targets.stop)
	return st
}

// TestFollowerDrainHeldAfterWatchStoresAll: the revisions a prewatch held
// for a new chain are received, and cut into segments, after an earlier
// watch of the follower ended. A store slower than SlowStore there must not
// cancel that ended watch again and drop the rest of what is held: no watch
// runs, nothing is buffered, and etcd may have compacted what is dropped.
func TestFollowerDrainHeldAfterWatchStoresAll(t *testing.T) {
	f := &Follower{Cluster: "prod-a", Pipeline: &Pipeline{},
		Targets:         []Target{{Destination: "slow", Uploader: delayUploader{50 * time.Millisecond}}},
		MaxSegmentBytes: 1, SlowStore: time.Millisecond, RetryInterval: time.Millisecond}
	st := drainState(t, f)
	st.restart(chainStart{next: 2, chain: "prod-a-full"})
	// A watch ran before, and ended.
	f.Client = etcdtest.Start(t).Client(t)
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, st.watch(ended), context.Canceled)
	for rev := int64(2); rev <= 4; rev++ {
		st.held = append(st.held, clientv3.WatchResponse{
			Header: &etcdserverpb.ResponseHeader{Revision: 4},
			Events: []*clientv3.Event{{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("/k"), Value: []byte("v"),
				CreateRevision: 2, ModRevision: rev, Version: rev - 1}}},
		})
	}
	require.NoError(t, st.drainHeld(t.Context()))
	require.Equal(t, int64(5), st.next, "every held revision received")
	require.Equal(t, int64(4), st.committed, "every held revision stored")
}

// TestFollowerDrainHeldErrorDropsWhatArrived: while the revisions a
// prewatch held are stored, its watch delivers the next ones, held in
// turn; a held revision that then fails (here, a header below what was
// committed, and etcd not reachable to confirm a rewind) leaves the rest
// of what the prewatch held unreceived. What its watch delivered
// meanwhile must not be received after that gap: the next watch reads
// on from st.next.
func TestFollowerDrainHeldErrorDropsWhatArrived(t *testing.T) {
	f := &Follower{Cluster: "prod-a", Pipeline: &Pipeline{},
		Targets:         []Target{{Destination: "slow", Uploader: delayUploader{50 * time.Millisecond}}},
		MaxSegmentBytes: 40, SlowStore: time.Minute, RetryInterval: time.Millisecond}
	st := drainState(t, f)
	put := func(rev, header int64) clientv3.WatchResponse {
		return clientv3.WatchResponse{Header: &etcdserverpb.ResponseHeader{Revision: header},
			Events: []*clientv3.Event{{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("/k"), Value: []byte("v"),
				CreateRevision: 2, ModRevision: rev, Version: rev - 1}}}}
	}
	wch := make(chan clientv3.WatchResponse, 1)
	wch <- put(4, 4) // delivered by the prewatch's watch while revision 2 is stored
	pre := &prewatch{from: 2, resume: 4, wch: wch, cancel: func() {}}
	st.restart(chainStart{next: 2, chain: "prod-a-full", held: []clientv3.WatchResponse{put(2, 3), put(3, 1)}, pre: pre})
	cli := etcdtest.Start(t).Client(t)
	require.NoError(t, cli.Close())
	f.Client = cli
	require.Error(t, st.drainHeld(t.Context()))
	require.Equal(t, int64(3), st.next)
	// Revision 4 after the gap at 3 would be stored as a segment no
	// target takes after revision 2.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	require.NoError(t, st.drainHeld(ctx), "what arrived after the gap was received")
	require.Equal(t, int64(3), st.next)
}
