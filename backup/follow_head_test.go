package backup

import (
	"context"
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

// gateUploader stores nothing; each upload waits until open is closed.
type gateUploader struct{ open chan struct{} }

func (u gateUploader) Upload(ctx context.Context, _ *Manifest, r io.Reader) error {
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-u.open:
		return nil
	}
}

func (gateUploader) Commit(context.Context, *Manifest) error { return nil }

// TestFollowerHeadCountsWhatArrivesWhileStoring: the watch delivers
// revisions while a segment is stored; the segment's commit reports etcd's
// head as they showed it (HeadRevision, the lag_revisions gauge), not the
// segment's own last revision, which said the follower was level with
// etcd at every commit of a busy cluster.
func TestFollowerHeadCountsWhatArrivesWhileStoring(t *testing.T) {
	gate := gateUploader{open: make(chan struct{})}
	var committed []FollowEvent
	f := &Follower{Cluster: "prod-a", Pipeline: &Pipeline{},
		Targets:         []Target{{Destination: "gated", Uploader: gate}},
		MaxSegmentBytes: 1 << 20, SlowStore: time.Minute, RetryInterval: time.Millisecond,
		Observer: FollowObserverFunc(func(e FollowEvent) {
			if e.Kind == SegmentCommitted {
				committed = append(committed, e)
			}
		})}
	st := drainState(t, f)
	st.restart(chainStart{next: 2, chain: "prod-a-full"})
	put := func(rev, header int64) clientv3.WatchResponse {
		return clientv3.WatchResponse{Header: &etcdserverpb.ResponseHeader{ClusterId: 7, Revision: header},
			Events: []*clientv3.Event{{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("/k"), Value: []byte("v"),
				CreateRevision: 2, ModRevision: rev, Version: rev - 1}}}}
	}
	require.NoError(t, st.receive(t.Context(), put(2, 2)))
	wch := make(chan clientv3.WatchResponse)
	st.watchCh, st.stopWatch = wch, func() {}
	go func() {
		wch <- put(3, 9) // received by the store's wait, before it ends
		close(gate.open)
	}()
	_, err := st.flush(t.Context())
	require.NoError(t, err)
	require.Len(t, committed, 1)
	require.Equal(t, int64(2), committed[0].Committed)
	require.Equal(t, int64(9), committed[0].HeadRevision, "etcd's head as the response held while storing showed it")
	require.Len(t, st.held, 1, "the response is held for the watch loop")
}

// TestFollowerHeadFromHeldResponsesOfTheChain: while a segment is stored,
// a held response of another cluster, or of a member behind what was
// committed, shows no head; the chain's own does, and the next segment's
// lag counts from when its first revision arrived, held, not from when
// the held response was received after the store.
func TestFollowerHeadFromHeldResponsesOfTheChain(t *testing.T) {
	var clock atomic.Int64
	base := time.Unix(1_700_000_000, 0)
	gate := gateUploader{open: make(chan struct{})}
	var committed []FollowEvent
	f := &Follower{Cluster: "prod-a", Pipeline: &Pipeline{Now: func() time.Time { return base.Add(time.Duration(clock.Load()) * time.Second) }},
		Targets:         []Target{{Destination: "gated", Uploader: gate}},
		MaxSegmentBytes: 1 << 20, SlowStore: time.Hour, RetryInterval: time.Millisecond,
		Observer: FollowObserverFunc(func(e FollowEvent) {
			if e.Kind == SegmentCommitted {
				committed = append(committed, e)
			}
		})}
	st := drainState(t, f)
	st.restart(chainStart{next: 2, chain: "prod-a-full"})
	resp := func(cluster uint64, header int64, revs ...int64) clientv3.WatchResponse {
		wr := clientv3.WatchResponse{Header: &etcdserverpb.ResponseHeader{ClusterId: cluster, Revision: header}}
		for _, rev := range revs {
			wr.Events = append(wr.Events, &clientv3.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("/k"), Value: []byte("v"),
				CreateRevision: 2, ModRevision: rev, Version: rev - 1}})
		}
		return wr
	}
	require.NoError(t, st.receive(t.Context(), resp(7, 2, 2)))
	wch := make(chan clientv3.WatchResponse)
	st.watchCh, st.stopWatch = wch, func() {}
	go func() {
		clock.Store(10)
		wch <- resp(8, 500)  // another cluster
		wch <- resp(7, 1)    // a member behind what was committed
		wch <- resp(7, 9, 3) // the chain's: head 9
		wch <- resp(8, 501)  // taken once the one before was held
		clock.Store(20)
		close(gate.open)
	}()
	_, err := st.flush(t.Context())
	require.NoError(t, err)
	require.Len(t, committed, 1)
	require.Equal(t, int64(9), committed[0].HeadRevision, "neither another cluster's header nor a lagging member's")
	st.watchCh, st.stopWatch = nil, nil
	clock.Store(30)
	st.held = st.held[2:3] // the other cluster's and the lagging member's need etcd to be judged
	require.NoError(t, st.drainHeld(t.Context()))
	clock.Store(40)
	_, err = st.flush(t.Context())
	require.NoError(t, err)
	require.Len(t, committed, 2)
	require.Equal(t, 30*time.Second, committed[1].Lag, "revision 3 was known at 10 s and committed at 40 s")
}

// TestFollowerHeadFromWhatAPrewatchHeld: a new chain's ChainStarted
// reports the head the prewatch's last held response showed; the
// segments cut while those held responses are drained report it too
// (HeadRevision, the lag_revisions gauge), not each response's own
// header as it is received: the head went backwards, and the follower
// read as level with etcd.
func TestFollowerHeadFromWhatAPrewatchHeld(t *testing.T) {
	var (
		mu     sync.Mutex
		events []FollowEvent
	)
	f := &Follower{Cluster: "prod-a", Pipeline: &Pipeline{},
		Targets:         []Target{{Destination: "x", Uploader: delayUploader{}}},
		MaxSegmentBytes: 1, SlowStore: time.Minute, RetryInterval: time.Millisecond,
		Observer: FollowObserverFunc(func(e FollowEvent) {
			if e.Kind == ChainStarted || e.Kind == SegmentCommitted {
				mu.Lock()
				defer mu.Unlock()
				events = append(events, e)
			}
		})}
	st := drainState(t, f)
	c := chainStart{next: 2, chain: "prod-a-full", high: 1, held: []clientv3.WatchResponse{putAt(2, 2), putAt(3, 3), putAt(4, 50)}}
	st.restart(c)
	f.event(newChainStarted(c, time.Second))
	require.NoError(t, st.drainHeld(t.Context()))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, events, 4)
	require.Equal(t, ChainStarted, events[0].Kind)
	require.Equal(t, int64(50), events[0].HeadRevision)
	for _, e := range events[1:] {
		require.Equal(t, int64(50), e.HeadRevision, "the head of the segment committed up to %d", e.Committed)
	}
}

// TestFollowerLagEndsAtTheCommit: a segment's lag runs from the reception
// of its first revision to the store that committed it, not to the moment
// the follower's goroutine heard of the commit (on a busy process, a wait
// for a core later).
func TestFollowerLagEndsAtTheCommit(t *testing.T) {
	var clock atomic.Int64
	base := time.Unix(1_700_000_000, 0)
	open := make(chan struct{})
	close(open)
	var committed []FollowEvent
	f := &Follower{Cluster: "prod-a", Pipeline: &Pipeline{Now: func() time.Time { return base.Add(time.Duration(clock.Load()) * time.Second) }},
		Targets:         []Target{{Destination: "open", Uploader: gateUploader{open: open}}},
		MaxSegmentBytes: 1 << 20, SlowStore: time.Hour, RetryInterval: time.Millisecond,
		Observer: FollowObserverFunc(func(e FollowEvent) {
			switch e.Kind {
			case SegmentStored:
				clock.Add(5) // the follower hears of the commit 5 s after it
			case SegmentCommitted:
				committed = append(committed, e)
			}
		})}
	st := drainState(t, f)
	st.restart(chainStart{next: 2, chain: "prod-a-full"})
	require.NoError(t, st.receive(t.Context(), clientv3.WatchResponse{Header: &etcdserverpb.ResponseHeader{ClusterId: 7, Revision: 2},
		Events: []*clientv3.Event{{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("/k"), Value: []byte("v"), CreateRevision: 2, ModRevision: 2, Version: 1}}}}))
	clock.Store(1)
	_, err := st.flush(t.Context())
	require.NoError(t, err)
	require.Len(t, committed, 1)
	require.Equal(t, time.Second, committed[0].Lag, "received at 0 s, committed at 1 s, heard of at 6 s")
}

// TestPendingHeldAt: a segment is held from its first commit on a target;
// in a recovery's tail, where every target must hold it and a target
// dropped as lost records no time, from when the follower saw it held.
func TestPendingHeldAt(t *testing.T) {
	base := time.Unix(1_700_000_000, 0)
	p := &pendingSegment{}
	now := base.Add(time.Hour)
	require.Equal(t, now, p.heldAt(false, now), "no commit recorded")
	p.committedOn(&Manifest{}, base.Add(2*time.Second))
	p.committedOn(&Manifest{}, base.Add(time.Second))
	require.Equal(t, base.Add(time.Second), p.heldAt(false, now))
	require.Equal(t, now, p.heldAt(true, now), "a tail: not before the follower saw it held")
}
