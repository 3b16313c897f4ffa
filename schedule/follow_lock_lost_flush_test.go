package schedule

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/cleanup"
)

// lastFlushFollower, once its context ends, stores its last segment on a
// cleanup context (as backup.Follower's finalFlush does): it reports
// flushing, and then the cause that ended that context, or nil if it
// still ran after 30 s.
type lastFlushFollower struct {
	*recorder
	flushing chan struct{}
	ended    chan error
}

func (f *lastFlushFollower) Follow(ctx context.Context, _ Job, started func()) error {
	started()
	<-ctx.Done()
	cctx, cancel := cleanup.Context(ctx, time.Hour)
	defer cancel()
	close(f.flushing)
	select {
	case <-cctx.Done():
		f.ended <- context.Cause(cctx)
	case <-time.After(30 * time.Second):
		f.ended <- nil
	}
	return nil
}

// TestFollowLockLostDuringLastSegment: the lock is lost while the
// follower stores its last segment after a stop cancelled it: the last
// segment's cleanup context ends, since another replica may follow the
// cluster now.
func TestFollowLockLostDuringLastSegment(t *testing.T) {
	lock := &fakeLock{}
	ff := &lastFlushFollower{flushing: make(chan struct{}), ended: make(chan error, 1)}
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{Runner: ff, Lock: lock, StopTimeout: time.Minute})
	ff.recorder = h.rec
	h.start()
	j := job("ns/a", "@daily")
	j.Continuous = &Continuous{Window: time.Hour}
	require.NoError(t, h.s.Set(j))
	eventually(t, func() bool { return h.status(j.ID).Following }, "following")

	h.cancel() // stop: the follower stores its last segment
	<-ff.flushing
	lock.mu.Lock()
	close(lock.lost) // the lease expires meanwhile
	lock.mu.Unlock()
	require.ErrorIs(t, <-ff.ended, errLockLost, "the last segment was still being stored after the lock was lost")
	require.NoError(t, <-h.done)
	h.cancel = nil
}
