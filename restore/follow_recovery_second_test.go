package restore_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
)

// failChain fails the commits of the segments of the chain named later,
// while down.
type failChain struct {
	inner backup.Uploader
	chain atomic.Pointer[string]
	down  atomic.Bool
}

func (u *failChain) Upload(ctx context.Context, m *backup.Manifest, r io.Reader) error {
	return u.inner.Upload(ctx, m, r)
}

func (u *failChain) Commit(ctx context.Context, m *backup.Manifest) error {
	if c := u.chain.Load(); u.down.Load() && c != nil && m.IsDelta() && m.Chain == *c {
		return errors.New("chain followed down")
	}
	return u.inner.Commit(ctx, m)
}

// TestFollowerTailIncompleteKeptThroughAnotherOutage: a recovery's tail
// ends with ErrTailIncomplete (y lacks it) and stays recorded. The chain
// followed then falls far behind again: the follower catches up on it
// instead of recovering again (a second tail would replace the record),
// and a follower started again resumes the first tail on y, which then
// holds it.
func TestFollowerTailIncompleteKeptThroughAnotherOutage(t *testing.T) {
	o := newTailOutage(t, func(f *backup.Follower) { f.MaxSegmentBytes, f.FinalCommitTimeout = 16<<10, time.Second })
	y, cli, follower, oldChain := o.y, o.cli, o.follower, o.oldChain
	oldEnd := chainEnd(t, y, oldChain)

	rec := &followEvents{}
	f := follower(rec)
	failing := &failingTail{inner: f.Targets[1].Uploader, chain: oldChain, from: oldEnd + 1}
	failing.down.Store(true)
	gx := &failChain{inner: f.Targets[0].Uploader}
	gy := &failChain{inner: failing}
	f.Targets[0].Uploader, f.Targets[1].Uploader = gx, gy
	stop := runFollower(t, f)
	require.Eventually(t, func() bool { return rec.count(backup.RecoveryDone) == 1 }, 30*time.Second, 10*time.Millisecond)
	done, _ := rec.first(backup.RecoveryDone)
	require.ErrorIs(t, done.Err, backup.ErrTailIncomplete, "events: %v", rec.kinds())
	until1 := done.HeadRevision
	require.Less(t, chainEnd(t, y, oldChain), until1, "y lacks the tail")

	// The chain followed falls far behind: an outage of both destinations.
	c2, _ := rec.first(backup.ChainStarted)
	name := c2.Chain
	gx.chain.Store(&name)
	gy.chain.Store(&name)
	gx.down.Store(true)
	gy.down.Store(true)
	h, err := cli.Get(t.Context(), "x")
	require.NoError(t, err)
	putsPast(t, cli, "/bulk2", h.Header.Revision+1000)
	gx.down.Store(false)
	gy.down.Store(false)
	d := workload(t, cli, "/d", 3)
	head := d[len(d)-1]
	require.Eventually(t, func() bool {
		_, ok := rec.find(func(e backup.FollowEvent) bool {
			return (e.Kind == backup.SegmentCommitted || e.Kind == backup.ChainStarted) && e.Committed >= head
		})
		return ok
	}, 60*time.Second, 20*time.Millisecond, "the follower catches up")
	// The chain followed's newest segment, which a follower started again
	// reads the tail to resume from.
	e := workload(t, cli, "/e", 3)
	require.Eventually(t, func() bool {
		_, ok := rec.find(func(ev backup.FollowEvent) bool {
			return ev.Kind == backup.SegmentCommitted && ev.Committed >= e[len(e)-1]
		})
		return ok
	}, 30*time.Second, 20*time.Millisecond, "the follower stores the last writes")
	recoveries := rec.count(backup.RecoveryStarted)
	require.NoError(t, stop())

	// Started again: the first tail is resumed on y.
	rec = &followEvents{}
	stop = runFollower(t, follower(rec))
	defer func() { _ = stop() }()
	require.Eventually(t, func() bool {
		_, ok := rec.find(func(e backup.FollowEvent) bool { return e.Kind == backup.RecoveryStarted && e.Chain == oldChain })
		return ok
	}, 30*time.Second, 50*time.Millisecond, "the tail of %s is resumed on y", oldChain)
	require.Eventually(t, func() bool { return chainEnd(t, y, oldChain) >= until1 }, 30*time.Second, 50*time.Millisecond,
		"y holds the tail")
	require.Equal(t, 1, recoveries, "the follower caught up on its chain: no second recovery")
}
