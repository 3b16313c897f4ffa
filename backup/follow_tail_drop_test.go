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
)

// flakyThenSlow fails its first upload (unless up is set), then stores
// after slow.
type flakyThenSlow struct {
	calls atomic.Int32
	slow  time.Duration
	up    atomic.Bool // when set, never fails
	tries atomic.Int32
}

func (u *flakyThenSlow) Upload(ctx context.Context, _ *Manifest, r io.Reader) error {
	_, _ = io.Copy(io.Discard, r)
	u.tries.Add(1)
	if u.calls.Add(1) == 1 && !u.up.Load() {
		return errors.New("blip")
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(u.slow):
		return nil
	}
}

func (*flakyThenSlow) Commit(context.Context, *Manifest) error { return nil }

// newTailState returns the state of a recovery's tail of chain
// prod-a-full from revision 2, its targets started and stopped with t.
func newTailState(t *testing.T, f *Follower) *followState {
	t.Helper()
	codec, err := newSegmentCodec(f.Cluster, f.Pipeline)
	require.NoError(t, err)
	st := &followState{f: f, codec: codec, builder: newSegmentBuilder(), leases: map[int64]bool{}, chain: "prod-a-full"}
	st.targets = f.newFollowTargets(2, "prod-a-full", nil)
	st.targets.recovery = true
	st.targets.start(t.Context())
	t.Cleanup(st.targets.stop)
	st.restart(chainStart{next: 2, chain: "prod-a-full"})
	return st
}

// putAndFlush has st receive a put at each revision from 2 to last, each
// flushed into a segment of its own.
func putAndFlush(t *testing.T, st *followState, last int64) {
	t.Helper()
	for rev := int64(2); rev <= last; rev++ {
		require.NoError(t, st.receive(t.Context(), putAt(rev, rev)))
		_, err := st.flush(t.Context())
		require.NoError(t, err)
	}
}

// tailOfOneSegment returns a recovery tail's state whose targets were
// handed one segment, revision 2, without waiting for them.
func tailOfOneSegment(t *testing.T, f *Follower) *followState {
	st := newTailState(t, f)
	require.NoError(t, st.receive(t.Context(), putAt(2, 2)))
	// Handed to the targets, as flush does, but not waited for.
	raw := st.builder.finish()
	seg, err := st.codec.encode(raw, st.builder.sum, st.chain, st.clusterID)
	require.NoError(t, err)
	st.targets.enqueue(&pendingSegment{encodedSegment: seg, sum: st.builder.sum, raw: len(raw)})
	return st
}

// TestFollowerTailWaitsForAnAttemptInFlight: y failed once; its retry is
// in flight (slow, but it succeeds) when the tail's bound passes. The
// tail waits for that attempt: y holds the tail and is not reported as
// lacking it.
func TestFollowerTailWaitsForAnAttemptInFlight(t *testing.T) {
	u := &flakyThenSlow{slow: 700 * time.Millisecond}
	f := &Follower{Cluster: "prod-a", Pipeline: &Pipeline{},
		Targets:   []Target{{Destination: "x", Uploader: delayUploader{}}, {Destination: "y", Uploader: u}},
		SlowStore: time.Minute, RetryInterval: 10 * time.Millisecond}
	st := tailOfOneSegment(t, f)
	require.Eventually(t, func() bool { return u.tries.Load() == 2 }, 30*time.Second, time.Millisecond, "y retries")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.True(t, st.targets.awaitTailStored(ctx, 300*time.Millisecond))
	require.Empty(t, st.targets.lostWhileRunning(), "y stored the tail")
	require.Equal(t, int64(2), st.targets.list[1].committed)
}

// TestFollowerTailWaitsForAnAttempt: y failed once before the tail's end
// and pauses before its retry longer than the bound; the destination is
// back by then. y is not dropped without an attempt within the bound: its
// retry stores the tail. The bound itself is at least the longest pause.
func TestFollowerTailWaitsForAnAttempt(t *testing.T) {
	u := &flakyThenSlow{}
	f := &Follower{Cluster: "prod-a", Pipeline: &Pipeline{},
		Targets:   []Target{{Destination: "x", Uploader: delayUploader{}}, {Destination: "y", Uploader: u}},
		SlowStore: time.Minute, RetryInterval: 2 * time.Second, FinalCommitTimeout: time.Second}
	require.Equal(t, 20*time.Second, f.tailBound(), "ten times RetryInterval")
	st := tailOfOneSegment(t, f)
	require.Eventually(t, func() bool { return u.tries.Load() == 1 }, 30*time.Second, time.Millisecond)
	u.up.Store(true) // the destination is back at the tail's end
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.True(t, st.targets.awaitTailStored(ctx, f.FinalCommitTimeout))
	require.Empty(t, st.targets.lostWhileRunning(), "y was dropped after %d attempt(s), none in the bound", u.tries.Load())
	require.Equal(t, int64(2), st.targets.list[1].committed)
}

// failOnceSlowly fails its first upload after a moment, then stores.
type failOnceSlowly struct{ calls atomic.Int32 }

func (u *failOnceSlowly) Upload(ctx context.Context, _ *Manifest, r io.Reader) error {
	_, _ = io.Copy(io.Discard, r)
	if u.calls.Add(1) == 1 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		return errors.New("blip")
	}
	return nil
}

func (*failOnceSlowly) Commit(context.Context, *Manifest) error { return nil }

// TestFollowerTailKeepsATargetReportingItsStore: y's retry stored the
// segment and the observer is still being told so when the tail's bound
// passes. Until its outcome is recorded y is in an attempt, not idle and
// failing: it is never dropped as lacking a tail it holds (its attempt
// ended before the outcome was recorded, with the event between).
func TestFollowerTailKeepsATargetReportingItsStore(t *testing.T) {
	u := &failOnceSlowly{}
	inObserver, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f := &Follower{Cluster: "prod-a", Pipeline: &Pipeline{},
		Targets:   []Target{{Destination: "x", Uploader: delayUploader{}}, {Destination: "y", Uploader: u}},
		SlowStore: time.Minute, RetryInterval: 10 * time.Millisecond,
		Observer: FollowObserverFunc(func(e FollowEvent) {
			if e.Kind == SegmentStored && e.Destination == "y" {
				once.Do(func() { close(inObserver) })
				<-release // an exporter or a logger that blocks
			}
		})}
	st := tailOfOneSegment(t, f)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	done := make(chan bool, 1)
	go func() { done <- st.targets.awaitTailStored(ctx, 300*time.Millisecond) }()
	<-inObserver
	// The bound passes while y's observer runs: whatever the moment, y
	// must not turn lost.
	<-time.After(time.Second)
	close(release)
	require.True(t, <-done)
	require.Empty(t, st.targets.lostWhileRunning(), "y stored the tail")
	y := st.targets.list[1]
	y.mu.Lock()
	defer y.mu.Unlock()
	require.Equal(t, int64(2), y.committed)
	require.False(t, y.lost)
}
