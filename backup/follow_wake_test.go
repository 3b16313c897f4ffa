package backup

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFollowNextWake: the watch loop wakes when the segment is due (its
// first revision's receipt plus the flush interval), not at the next of
// eight ticks an interval; with no segment, when etcd is next to be asked
// for its revision, but not sooner than an eighth of the interval.
func TestFollowNextWake(t *testing.T) {
	interval := time.Second
	now := time.Date(2026, 11, 28, 7, 0, 0, 0, time.UTC)
	st := &followState{builder: newSegmentBuilder()}
	assert.Equal(t, interval/8, st.nextWake(now, time.Time{}, interval), "empty, never asked")
	assert.Equal(t, 700*time.Millisecond, st.nextWake(now, now.Add(-300*time.Millisecond), interval), "empty, asked 300 ms ago")
	assert.Equal(t, interval/8, st.nextWake(now, now.Add(-950*time.Millisecond), interval), "empty, asked 950 ms ago")

	require.NoError(t, st.builder.add(SegmentRevision{Revision: 7, Events: []SegmentEvent{{Key: []byte("k"), Value: []byte("v"), CreateRevision: 7, Version: 1, ModRevision: 7}}}))
	st.firstReceived = now.Add(-930 * time.Millisecond)
	assert.Equal(t, 70*time.Millisecond, st.nextWake(now, now, interval), "a segment due in 70 ms")
	st.firstReceived = now.Add(-2 * interval)
	assert.Equal(t, 5*time.Millisecond, st.nextWake(now, now, interval), "a segment overdue: at least 5 ms")
}
