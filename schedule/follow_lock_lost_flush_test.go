package schedule

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/cleanup"
)

// lastFlushFollower, once its context ends, stores its last segment on a
// publishing cleanup context and aborts an upload of its own on another
// cleanup context (as backup.Follower's finalFlush does): it reports
// flushing, and then the cause that ended the publishing context (nil if
// it still ran after 30 s) and the error of the other one at that moment.
type lastFlushFollower struct {
	*recorder
	flushing chan struct{}
	ended    chan [2]error
}

func (f *lastFlushFollower) Follow(ctx context.Context, _ Job, started func()) error {
	started()
	<-ctx.Done()
	pctx, cancelPublish := cleanup.Publish(ctx, time.Hour)
	defer cancelPublish()
	cctx, cancel := cleanup.Context(ctx, time.Hour)
	defer cancel()
	close(f.flushing)
	select {
	case <-pctx.Done():
		f.ended <- [2]error{context.Cause(pctx), cctx.Err()}
	case <-time.After(30 * time.Second):
		f.ended <- [2]error{nil, cctx.Err()}
	}
	return nil
}

// TestFollowLockLostDuringLastSegment: the lock is lost while the
// follower stores its last segment after a stop cancelled it: the last
// segment's publishing cleanup context ends, since another replica may
// follow the cluster now; its cleanups that publish nothing go on.
func TestFollowLockLostDuringLastSegment(t *testing.T) {
	lock := &fakeLock{}
	ff := &lastFlushFollower{flushing: make(chan struct{}), ended: make(chan [2]error, 1)}
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
	ended := <-ff.ended
	require.ErrorIs(t, ended[0], errLockLost, "the last segment was still being stored after the lock was lost")
	require.NoError(t, ended[1], "a cleanup that publishes nothing was ended by the lost lock")
	require.NoError(t, <-h.done)
	h.cancel = nil
}
