package backup

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFollowerTailWaitsForARetry: in a recovery's tail, y fails one
// attempt and works after its retry (RetryInterval). The tail waits for
// y meanwhile rather than reading on at x's pace: y's backlog, far
// smaller than the tail, never loses a segment, and y holds the tail.
func TestFollowerTailWaitsForARetry(t *testing.T) {
	u := &flakyThenSlow{}
	f := &Follower{Cluster: "prod-a", Pipeline: &Pipeline{},
		Targets:         []Target{{Destination: "x", Uploader: delayUploader{}}, {Destination: "y", Uploader: u}},
		MaxSegmentBytes: 1, MaxBacklogBytes: 600, SlowStore: time.Minute, RetryInterval: 200 * time.Millisecond}
	st := newTailState(t, f)
	putAndFlush(t, st, 20)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.True(t, st.targets.awaitTailStored(ctx, time.Hour))
	require.Empty(t, st.targets.lostWhileRunning(), "one failed attempt of y (%d tries) lost it the tail", u.tries.Load())
	require.Equal(t, int64(20), st.targets.list[1].committed)
}
