package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// gatedSnapshotter returns a snapshot at rev once gate is closed; called
// is closed when the first snapshot is asked.
type gatedSnapshotter struct {
	called, gate chan struct{}
	once         sync.Once
	rev          int64
}

func (s *gatedSnapshotter) Snapshot(ctx context.Context) (*Snapshot, error) {
	s.once.Do(func() { close(s.called) })
	select {
	case <-s.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	body := bytes.Repeat([]byte{7}, 2048)
	sum := sha256.Sum256(body)
	info := SnapshotInfo{Endpoint: "fake", MemberID: 0xabc, ClusterID: 0xdef, EtcdVersion: "3.7.3",
		RevisionLow: s.rev, RevisionHigh: s.rev, Leader: true, Healthy: true}
	return NewSnapshot(io.NopCloser(bytes.NewReader(append(body, sum[:]...))), info, nil), nil
}

// deltaRecorder records the segments committed.
type deltaRecorder struct {
	mu     sync.Mutex
	deltas []Manifest
}

func (u *deltaRecorder) Upload(ctx context.Context, _ *Manifest, r io.Reader) error {
	_, err := io.Copy(io.Discard, r)
	return err
}

func (u *deltaRecorder) Commit(_ context.Context, m *Manifest) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if m.IsDelta() {
		u.deltas = append(u.deltas, *m)
	}
	return nil
}

// TestFollowerOwnChainAfterRestartIsDiscarded: a lost target's own full
// backup is taken while the follower starts a new chain (etcd's history
// rewound) that reaches the target; the own full completes after, of the
// old history: the target continues the new chain, not the full's.
func TestFollowerOwnChainAfterRestartIsDiscarded(t *testing.T) {
	snap := &gatedSnapshotter{called: make(chan struct{}), gate: make(chan struct{}), rev: 100}
	up := &deltaRecorder{}
	f := &Follower{Cluster: "prod-a", Pipeline: &Pipeline{Snapshotter: snap},
		Targets:       []Target{{Destination: "west", Uploader: up}},
		RetryInterval: time.Millisecond}
	all := f.newFollowTargets(51, "old-chain", nil)
	all.list[0].lost, all.list[0].behind = true, true
	all.start(t.Context())
	defer all.stop()
	<-snap.called // the own full backup is being taken (old history, revision 100)
	all.restart(41, "new-chain", nil)
	close(snap.gate)
	codec, err := newSegmentCodec(f.Cluster, f.Pipeline)
	require.NoError(t, err)
	sum := SegmentSummary{FirstRevision: 41, LastRevision: 120}
	seg, err := codec.encode([]byte("raw"), sum, "new-chain", 0)
	require.NoError(t, err)
	all.enqueue(&pendingSegment{encodedSegment: seg, sum: sum})
	require.Eventually(t, func() bool { up.mu.Lock(); defer up.mu.Unlock(); return len(up.deltas) > 0 }, 30*time.Second, 5*time.Millisecond)
	up.mu.Lock()
	defer up.mu.Unlock()
	require.Equal(t, "new-chain", up.deltas[0].Chain, "a segment of the new history continues a full of the old one")
	require.Equal(t, int64(41), up.deltas[0].FirstRevision)
}

// TestFollowerRestartReportsDroppedBacklog: a destination that had not
// stored its backlog when the follower starts a new chain loses those
// revisions of the ended chain: it is reported lost and behind, and the
// one that held everything is not.
func TestFollowerRestartReportsDroppedBacklog(t *testing.T) {
	var mu sync.Mutex
	var events []FollowEvent
	f := &Follower{Cluster: "prod-a", Pipeline: &Pipeline{},
		Targets: []Target{{Destination: "east", Uploader: &deltaRecorder{}}, {Destination: "west", Uploader: &deltaRecorder{}}},
		Observer: FollowObserverFunc(func(e FollowEvent) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, e)
		})}
	all := f.newFollowTargets(51, "old-chain", nil)
	codec, err := newSegmentCodec(f.Cluster, f.Pipeline)
	require.NoError(t, err)
	sum := SegmentSummary{FirstRevision: 51, LastRevision: 60}
	seg, err := codec.encode([]byte("raw"), sum, "old-chain", 0)
	require.NoError(t, err)
	all.enqueue(&pendingSegment{encodedSegment: seg, sum: sum})
	all.list[0].stored(f, all.list[0].backlog[0], all.list[0].gen) // east holds it, west is slow
	all.restart(71, "new-chain", nil)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, events, 1)
	require.Equal(t, TargetLost, events[0].Kind)
	require.Equal(t, "west", events[0].Destination)
	require.Equal(t, int64(51), events[0].Revision)
	require.ErrorContains(t, events[0].Err, "51..60")
	require.True(t, all.list[1].behind)
	require.False(t, all.list[1].lost, "it continues the new chain")
	require.False(t, all.list[0].behind)
}

// TestFollowerTargetEventsOutsideLock: the events a target reports when
// it catches up or is lost reach the observer while the target's state is
// not locked, so that an observer may ask it.
func TestFollowerTargetEventsOutsideLock(t *testing.T) {
	var all *followTargets
	var kinds []FollowEventKind
	locked := 0
	f := &Follower{Cluster: "prod-a", Pipeline: &Pipeline{},
		Targets: []Target{{Destination: "west", Uploader: &deltaRecorder{}}},
		Observer: FollowObserverFunc(func(e FollowEvent) {
			kinds = append(kinds, e.Kind)
			if !all.list[0].mu.TryLock() {
				locked++
				return
			}
			all.list[0].mu.Unlock()
		})}
	all = f.newFollowTargets(51, "chain", nil)
	codec, err := newSegmentCodec(f.Cluster, f.Pipeline)
	require.NoError(t, err)
	segment := func(first, last int64) *pendingSegment {
		sum := SegmentSummary{FirstRevision: first, LastRevision: last}
		seg, err := codec.encode([]byte("raw"), sum, "chain", 0)
		require.NoError(t, err)
		return &pendingSegment{encodedSegment: seg, sum: sum}
	}
	ts := all.list[0]
	ts.behind = true
	all.enqueue(segment(51, 60))
	seg, _, gen, _ := ts.next(all)
	ts.stored(f, seg, gen) // caught up
	all.enqueue(segment(71, 80))
	_, _, _, lost := ts.next(all) // 61..70 left the backlog: lost
	require.True(t, lost)
	require.Equal(t, []FollowEventKind{TargetCaughtUp, TargetLost}, kinds)
	require.Zero(t, locked, "events reported while the target's state was locked")
}

// gatedRecorder is a deltaRecorder whose commits wait for gate.
type gatedRecorder struct {
	deltaRecorder
	gate chan struct{}
}

func (u *gatedRecorder) Commit(ctx context.Context, m *Manifest) error {
	select {
	case <-u.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return u.deltaRecorder.Commit(ctx, m)
}

// TestFollowerBytesCountedPerDestination: the stored bytes metric counts
// a segment on each destination when it stores it, a slow one too.
func TestFollowerBytesCountedPerDestination(t *testing.T) {
	east, west := &deltaRecorder{}, &gatedRecorder{gate: make(chan struct{})}
	m := NewFollowerMetrics()
	f := &Follower{Cluster: "prod-a", Pipeline: &Pipeline{}, RetryInterval: time.Millisecond, Observer: m,
		Targets: []Target{{Destination: "east", Uploader: east}, {Destination: "west", Uploader: west}}}
	all := f.newFollowTargets(51, "chain", nil)
	all.start(t.Context())
	defer all.stop()
	codec, err := newSegmentCodec(f.Cluster, f.Pipeline)
	require.NoError(t, err)
	sum := SegmentSummary{FirstRevision: 51, LastRevision: 60}
	seg, err := codec.encode([]byte("raw"), sum, "chain", 0)
	require.NoError(t, err)
	all.enqueue(&pendingSegment{encodedSegment: seg, sum: sum})
	size := float64(len(seg.stored))
	bytes := func() float64 { return testutil.ToFloat64(m.bytes.WithLabelValues("prod-a")) }
	require.Eventually(t, func() bool { return bytes() == size }, 30*time.Second, 5*time.Millisecond, "east stored it")
	close(west.gate)
	require.Eventually(t, func() bool { return bytes() == 2*size }, 30*time.Second, 5*time.Millisecond, "west stored it too")
}
