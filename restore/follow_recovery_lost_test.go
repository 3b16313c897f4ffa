package restore_test

import (
	"context"
	"errors"
	"iter"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage"
)

// find returns the first event match accepts.
func (f *followEvents) find(match func(backup.FollowEvent) bool) (backup.FollowEvent, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.events {
		if match(e) {
			return e, true
		}
	}
	return backup.FollowEvent{}, false
}

// TestFollowerTailLostTargetIsReported: while a recovery's tail is stored
// on x, y fails it past FinalCommitTimeout. y lost revisions of the
// tail, a gap there: it is reported (TargetLost on the old chain), the
// tail is done without it, and RecoveryDone says y lacks it
// (ErrTailIncomplete). The tail stays recorded: a follower started again
// resumes it on y, which then holds it whole.
func TestFollowerTailLostTargetIsReported(t *testing.T) {
	o := newTailOutage(t, func(f *backup.Follower) { f.MaxSegmentBytes = 4 << 10 })
	x, y, cli, follower, oldChain := o.x, o.y, o.cli, o.follower, o.oldChain
	oldEnd := chainEnd(t, y, oldChain)

	rec := &followEvents{}
	f := follower(rec)
	f.MaxBacklogBytes = 1 // one segment
	f.FinalCommitTimeout = time.Second
	failing := &failingTail{inner: f.Targets[1].Uploader, chain: oldChain, from: oldEnd + 1}
	failing.down.Store(true)
	f.Targets[1].Uploader = failing
	stop := runFollower(t, f)
	require.Eventually(t, func() bool { return rec.count(backup.RecoveryDone) == 1 }, 30*time.Second, 10*time.Millisecond,
		"events: %v", rec.kinds())
	done, _ := rec.first(backup.RecoveryDone)
	require.ErrorIs(t, done.Err, backup.ErrTailIncomplete, "x holds the tail, y does not")
	require.Equal(t, []string{"y"}, done.Destinations)
	require.Less(t, chainEnd(t, y, oldChain), done.HeadRevision, "y lacks some of the tail")
	require.Zero(t, rec.count(backup.ChainGap), "the revisions y lacks restore from x: %v", rec.kinds())
	lost, ok := rec.find(func(e backup.FollowEvent) bool {
		return e.Kind == backup.TargetLost && e.Destination == "y" && e.Chain == oldChain
	})
	require.True(t, ok, "y's gap in the tail is reported: %v", rec.kinds())
	require.Greater(t, lost.Revision, oldEnd)
	require.LessOrEqual(t, lost.Revision, chainEnd(t, y, oldChain)+1, "from the first revision y lacks")

	// The new chain's segments record the tail still: started again, the
	// follower resumes it on y.
	newChain, _ := rec.first(backup.ChainStarted)
	d := workload(t, cli, "/d", 3)
	require.Eventually(t, func() bool { return chainEnd(t, x, newChain.Chain) >= d[len(d)-1] }, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, stop())
	yEnd := chainEnd(t, y, oldChain)
	rec = &followEvents{}
	stop = runFollower(t, follower(rec))
	defer func() { _ = stop() }()
	require.Eventually(t, func() bool { return rec.count(backup.RecoveryDone) == 1 }, 30*time.Second, 10*time.Millisecond,
		"y's tail is resumed")
	started, ok := rec.first(backup.RecoveryStarted)
	require.True(t, ok, "events: %v", rec.kinds())
	require.Equal(t, oldChain, started.Chain)
	require.Equal(t, yEnd+1, started.Revision, "from what y holds")
	done, _ = rec.first(backup.RecoveryDone)
	require.NoError(t, done.Err)
	require.GreaterOrEqual(t, chainEnd(t, y, oldChain), done.HeadRevision)
}

// downCatalog is a catalog that cannot be listed.
type downCatalog struct{ backup.Catalog }

func (downCatalog) List(context.Context, string) iter.Seq2[storage.ObjectInfo, error] {
	return func(yield func(storage.ObjectInfo, error) bool) {
		yield(storage.ObjectInfo{}, errors.New("catalog down"))
	}
}

// TestFollowerResumesTailWithACatalogDown: a follower stopped while x
// lacks a recovery's tail (y holds it) starts again while y's catalog
// cannot be listed: x's tail is resumed all the same, and it restores.
func TestFollowerResumesTailWithACatalogDown(t *testing.T) {
	o := newTailOutage(t, func(f *backup.Follower) { f.MaxSegmentBytes = 16 << 10 })
	x, y, cli, follower, oldChain := o.x, o.y, o.cli, o.follower, o.oldChain
	oldEnd := chainEnd(t, x, oldChain)

	// x's tail waits at a gate; y's is stored whole.
	rec := &followEvents{}
	f := follower(rec)
	f.FinalCommitTimeout = 2 * time.Second
	gate := &seenGate{gatedTail: gatedTail{inner: f.Targets[0].Uploader, chain: oldChain, from: oldEnd + 1, gate: make(chan struct{})}}
	f.Targets[0].Uploader = gate
	stop := runFollower(t, f)
	require.Eventually(t, gate.seen.Load, 30*time.Second, 10*time.Millisecond, "events: %v", rec.kinds())
	newChain, ok := rec.first(backup.ChainStarted)
	require.True(t, ok, "events: %v", rec.kinds())
	d := workload(t, cli, "/d", 6)
	require.Eventually(t, func() bool {
		return chainEnd(t, x, newChain.Chain) >= d[len(d)-1] && chainEnd(t, y, newChain.Chain) >= d[len(d)-1]
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, stop())
	close(gate.gate)
	xEnd := chainEnd(t, x, oldChain)

	rec = &followEvents{}
	f = follower(rec)
	f.Catalogs[1] = downCatalog{f.Catalogs[1]}
	stop = runFollower(t, f)
	defer func() { _ = stop() }()
	require.Eventually(t, func() bool { return rec.count(backup.RecoveryDone) == 1 }, 30*time.Second, 10*time.Millisecond,
		"x's tail is resumed: %v", rec.kinds())
	started, ok := rec.first(backup.RecoveryStarted)
	require.True(t, ok, "events: %v", rec.kinds())
	require.Equal(t, oldChain, started.Chain)
	require.Equal(t, xEnd+1, started.Revision, "from what x holds")
	done, _ := rec.first(backup.RecoveryDone)
	require.NoError(t, done.Err)
	require.GreaterOrEqual(t, chainEnd(t, x, oldChain), done.HeadRevision)
}
