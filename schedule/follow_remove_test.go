package schedule

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// flushingFollower is a ContinuousRunner whose Follow, once its context
// ends, stores its last segment: it reports flushing and waits for flushed
// before it returns, as a follower's final commit to a slow store does.
type flushingFollower struct {
	*recorder
	flushing chan string // the job's follow key, as each starts its final flush
	flushed  chan struct{}

	mu      sync.Mutex
	running int
}

func (f *flushingFollower) Follow(ctx context.Context, job Job, started func()) error {
	f.mu.Lock()
	f.running++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.running--
		f.mu.Unlock()
	}()
	started()
	<-ctx.Done()
	f.flushing <- job.Name
	<-f.flushed
	return nil
}

func (f *flushingFollower) followers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running
}

// TestRemoveWaitsForReplacedFollow changes a continuous job (its follower
// starts again) and removes it while the replaced follower still stores
// its last segment: Remove must not report the job gone before that
// follower has returned, since a host may delete the cluster's backups
// next.
func TestRemoveWaitsForReplacedFollow(t *testing.T) {
	noLeaks(t)
	ff := &flushingFollower{flushing: make(chan string, 2), flushed: make(chan struct{})}
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{Runner: ff})
	ff.recorder = h.rec
	release := sync.OnceFunc(func() { close(ff.flushed) })
	h.start()
	t.Cleanup(release) // before the harness stops the scheduler, if a check fails

	j := job("ns/a", "@daily")
	j.Continuous = &Continuous{Window: time.Hour}
	require.NoError(t, h.s.Set(j))
	eventually(t, func() bool { return h.status(j.ID).Following }, "the first follower follows")

	j.Name = "renamed" // a change of what the follower writes: it starts again
	require.NoError(t, h.s.Set(j))
	require.Equal(t, "backup", <-ff.flushing, "the first follower stores its last segment")

	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	err := h.s.Remove(ctx, j.ID)
	require.ErrorIs(t, err, context.DeadlineExceeded, "Remove returned while the replaced follower was still writing")
	require.Equal(t, 1, ff.followers(), "the replaced follower still runs")

	release()
	eventually(t, func() bool { return ff.followers() == 0 }, "every follower to end")
	require.NoError(t, h.stop())
}
