package restore_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// chainEnd returns the last revision b holds of chain: its last
// segment's, else its full backup's; 0 when b holds nothing of it.
func chainEnd(t *testing.T, b storage.Bucket, chain string) int64 {
	t.Helper()
	entries, err := backup.ListBackups(t.Context(), b, "prod-a")
	require.NoError(t, err)
	var end int64
	for _, e := range entries {
		switch {
		case e.Kind == backup.KindDelta && e.Manifest.Chain == chain:
			end = max(end, e.Manifest.LastRevision)
		case e.ID == chain:
			end = max(end, e.Manifest.Etcd.Revision.Low)
		}
	}
	return end
}

// tailUntil returns the last revision of the tail that the recovery's
// full backup chain records (Manifest.Recovery): its upper revision.
func tailUntil(t *testing.T, b storage.Bucket, chain string) int64 {
	t.Helper()
	entries, err := backup.ListBackups(t.Context(), b, "prod-a")
	require.NoError(t, err)
	for _, e := range entries {
		if e.ID == chain {
			require.NotNil(t, e.Manifest.Recovery, "the recovery's full backup records its tail")
			return e.Manifest.Recovery.Until
		}
	}
	require.Fail(t, "no full backup "+chain)
	return 0
}

// TestFollowerResumesEachTargetsTail: a follower to two destinations,
// each with its own catalog, recovers; the old chain's tail is stored
// whole on x, and y fails it until the follower stops (a tail waits for
// every destination that works: y's failures let x go on). Started again,
// it resumes the tail from what y holds (x's catalog, the first, holds it
// all), and every revision of the tail restores from y exactly.
func TestFollowerResumesEachTargetsTail(t *testing.T) {
	x, y := memBucket(t), memBucket(t)
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	follower := func(rec *followEvents) *backup.Follower {
		f := destinationsFollower(t, etcd, rec, map[string]storage.Bucket{"x": x, "y": y}, "x", "y")
		f.RecoveryRevisions, f.MaxSegmentBytes = 300, 16<<10
		return f
	}

	rec := &followEvents{}
	stop := runFollower(t, follower(rec))
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	oldChain, _ := rec.first(backup.ChainStarted)
	a := workload(t, cli, "/a", 6)
	oldEnd := a[len(a)-1]
	require.Eventually(t, func() bool {
		return chainEnd(t, x, oldChain.Chain) >= oldEnd && chainEnd(t, y, oldChain.Chain) >= oldEnd
	},
		30*time.Second, 20*time.Millisecond)
	require.NoError(t, stop())
	oldEnd = chainEnd(t, y, oldChain.Chain)
	require.Equal(t, oldEnd, chainEnd(t, x, oldChain.Chain))

	tail := workload(t, cli, "/b", 12)
	putsPast(t, cli, "/bulk", tail[len(tail)-1]+1000)
	tail = append(tail, workload(t, cli, "/c", 6)...)

	// y fails the tail; x's is stored whole.
	rec = &followEvents{}
	f := follower(rec)
	f.FinalCommitTimeout = 2 * time.Second
	failing := &failingTail{inner: f.Targets[1].Uploader, chain: oldChain.Chain, from: oldEnd + 1}
	failing.down.Store(true)
	f.Targets[1].Uploader = failing
	stop = runFollower(t, f)
	require.Eventually(t, func() bool { return failing.failures.Load() > 0 }, 30*time.Second, 10*time.Millisecond,
		"y fails a tail segment: %v", rec.kinds())
	newChain, ok := rec.first(backup.ChainStarted)
	require.True(t, ok, "events: %v", rec.kinds())
	until := tailUntil(t, x, newChain.Chain)
	require.GreaterOrEqual(t, until, tail[len(tail)-1])
	require.Eventually(t, func() bool { return chainEnd(t, x, oldChain.Chain) >= until }, 30*time.Second, 20*time.Millisecond,
		"x holds the whole tail: %v", rec.kinds())
	// The new chain has a segment on both: a follower started again
	// follows it, and reads the tail's record from it.
	d := workload(t, cli, "/d", 6)
	require.Eventually(t, func() bool {
		return chainEnd(t, x, newChain.Chain) >= d[len(d)-1] && chainEnd(t, y, newChain.Chain) >= d[len(d)-1]
	},
		30*time.Second, 20*time.Millisecond)
	require.NoError(t, stop())
	stopped, ok := rec.first(backup.RecoveryDone)
	require.True(t, ok, "events: %v", rec.kinds())
	require.Error(t, stopped.Err, "y lacks the tail: not done")
	yEnd := chainEnd(t, y, oldChain.Chain)
	require.Less(t, yEnd, until, "y lacks some of the tail")

	rec = &followEvents{}
	stop = runFollower(t, follower(rec))
	require.Eventually(t, func() bool { return rec.count(backup.RecoveryDone) == 1 }, 30*time.Second, 10*time.Millisecond,
		"the tail y lacks is resumed: %v", rec.kinds())
	require.NoError(t, stop())
	started, ok := rec.first(backup.RecoveryStarted)
	require.True(t, ok, "events: %v", rec.kinds())
	require.Equal(t, oldChain.Chain, started.Chain)
	require.Equal(t, yEnd+1, started.Revision, "from what y holds")
	done, _ := rec.first(backup.RecoveryDone)
	require.NoError(t, done.Err)
	require.GreaterOrEqual(t, chainEnd(t, y, oldChain.Chain), until)
	for _, rev := range []int64{oldEnd + 1, tail[3], tail[len(tail)-1], until} {
		for name, b := range map[string]storage.Bucket{"x": x, "y": y} {
			restored, res, srv := restorePoint(t, b, restore.Point{Cluster: "prod-a", Revision: rev})
			require.Equal(t, rev, res.Revision, "on %s", name)
			requireSameAt(t, cli, restored, rev)
			srv.Stop()
		}
	}
}

// failingTail fails the commits of the segments of chain from revision
// from on while down is set, counting them.
type failingTail struct {
	inner    backup.Uploader
	chain    string
	from     int64
	down     atomic.Bool
	failures atomic.Int64
}

func (u *failingTail) Upload(ctx context.Context, m *backup.Manifest, r io.Reader) error {
	return u.inner.Upload(ctx, m, r)
}

func (u *failingTail) Commit(ctx context.Context, m *backup.Manifest) error {
	if u.down.Load() && m.IsDelta() && m.Chain == u.chain && m.FirstRevision >= u.from {
		u.failures.Add(1)
		return errors.New("destination down")
	}
	return u.inner.Commit(ctx, m)
}

// TestFollowerTailWaitsForAFailingTarget: while a recovery's tail is
// stored on x, y fails to store it. The tail waits for y and is not done
// (RecoveryDone) while y retries, within FinalCommitTimeout; once y
// answers, y holds the whole tail and its revisions restore from y
// exactly.
func TestFollowerTailWaitsForAFailingTarget(t *testing.T) {
	o := newTailOutage(t, func(f *backup.Follower) { f.MaxSegmentBytes = 16 << 10 })
	x, y, cli, follower, oldChain, tail := o.x, o.y, o.cli, o.follower, o.oldChain, o.tail
	oldEnd := chainEnd(t, y, oldChain)

	rec := &followEvents{}
	f := follower(rec)
	f.FinalCommitTimeout = 2 * time.Minute
	failing := &failingTail{inner: f.Targets[1].Uploader, chain: oldChain, from: oldEnd + 1}
	failing.down.Store(true)
	f.Targets[1].Uploader = failing
	stop := runFollower(t, f)
	defer func() { _ = stop() }()
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	newChain, _ := rec.first(backup.ChainStarted)
	until := tailUntil(t, x, newChain.Chain)
	seen := failing.failures.Load()
	require.Eventually(t, func() bool { return failing.failures.Load() >= seen+3 }, 30*time.Second, 10*time.Millisecond,
		"y retries the tail")
	require.Zero(t, rec.count(backup.RecoveryDone), "the tail is not done while y lacks it: %v", rec.kinds())

	failing.down.Store(false)
	require.Eventually(t, func() bool { return rec.count(backup.RecoveryDone) == 1 }, 30*time.Second, 10*time.Millisecond,
		"events: %v", rec.kinds())
	done, _ := rec.first(backup.RecoveryDone)
	require.NoError(t, done.Err)
	require.GreaterOrEqual(t, chainEnd(t, y, oldChain), until)
	for _, rev := range []int64{oldEnd + 1, tail[3], until} {
		restored, res, srv := restorePoint(t, y, restore.Point{Cluster: "prod-a", Revision: rev})
		require.Equal(t, rev, res.Revision)
		requireSameAt(t, cli, restored, rev)
		srv.Stop()
	}
}

// TestFollowerTailEndsForATargetStillFailing: x holds a recovery's whole
// tail, and y keeps failing it after the tail read its last revision.
// The tail does not wait for y until Run ends (no RecoveryDone, and no
// later outage could recover): past FinalCommitTimeout it ends, saying y
// lacks it, and stays recorded, so a follower started again resumes it
// on y.
func TestFollowerTailEndsForATargetStillFailing(t *testing.T) {
	o := newTailOutage(t, func(f *backup.Follower) { f.MaxSegmentBytes, f.FinalCommitTimeout = 16<<10, time.Second })
	x, y, cli, follower, oldChain := o.x, o.y, o.cli, o.follower, o.oldChain
	oldEnd := chainEnd(t, y, oldChain)

	rec := &followEvents{}
	f := follower(rec)
	failing := &failingTail{inner: f.Targets[1].Uploader, chain: oldChain, from: oldEnd + 1}
	failing.down.Store(true)
	f.Targets[1].Uploader = failing
	stop := runFollower(t, f)
	require.Eventually(t, func() bool { return rec.count(backup.RecoveryDone) == 1 }, 30*time.Second, 10*time.Millisecond,
		"the tail ends without y")
	done, _ := rec.first(backup.RecoveryDone)
	require.ErrorIs(t, done.Err, backup.ErrTailIncomplete, "events: %v", rec.kinds())
	require.Equal(t, []string{"y"}, done.Destinations)
	require.GreaterOrEqual(t, chainEnd(t, x, oldChain), done.HeadRevision, "x holds the tail")
	require.Less(t, chainEnd(t, y, oldChain), done.HeadRevision, "y lacks it")
	_, ok := rec.find(func(e backup.FollowEvent) bool {
		return e.Kind == backup.TargetLost && e.Destination == "y" && e.Chain == oldChain
	})
	require.True(t, ok, "y's gap in the tail is reported: %v", rec.kinds())

	newChain, _ := rec.first(backup.ChainStarted)
	d := workload(t, cli, "/d", 3)
	require.Eventually(t, func() bool { return chainEnd(t, x, newChain.Chain) >= d[len(d)-1] }, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, stop())
	rec = &followEvents{}
	stop = runFollower(t, follower(rec))
	defer func() { _ = stop() }()
	require.Eventually(t, func() bool { return rec.count(backup.RecoveryDone) == 1 }, 30*time.Second, 10*time.Millisecond,
		"y's tail is resumed")
	done, _ = rec.first(backup.RecoveryDone)
	require.NoError(t, done.Err)
	require.GreaterOrEqual(t, chainEnd(t, y, oldChain), done.HeadRevision)
}

// tailOutage is a follower over x and y that stored its chain's first
// writes on both and was stopped; etcd then took twelve writes (what a
// recovery's tail stores on the old chain) and a thousand more, past the
// followers' RecoveryRevisions (300): the next follower recovers.
type tailOutage struct {
	x, y     *blob.Bucket
	cli      *clientv3.Client
	follower func(*followEvents) *backup.Follower
	oldChain string
	tail     []int64 // the revisions of the twelve writes
}

// newTailOutage builds the outage; configure sets the options of every
// follower it makes.
func newTailOutage(t *testing.T, configure func(*backup.Follower)) *tailOutage {
	t.Helper()
	etcd := etcdtest.Start(t)
	o := &tailOutage{x: memBucket(t), y: memBucket(t), cli: etcd.Client(t)}
	o.follower = func(rec *followEvents) *backup.Follower {
		f := destinationsFollower(t, etcd, rec, map[string]storage.Bucket{"x": o.x, "y": o.y}, "x", "y")
		f.RecoveryRevisions = 300
		configure(f)
		return f
	}
	rec := &followEvents{}
	stop := runFollower(t, o.follower(rec))
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	started, _ := rec.first(backup.ChainStarted)
	o.oldChain = started.Chain
	a := workload(t, o.cli, "/a", 6)
	require.Eventually(t, func() bool {
		return chainEnd(t, o.x, o.oldChain) >= a[len(a)-1] && chainEnd(t, o.y, o.oldChain) >= a[len(a)-1]
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, stop())
	o.tail = workload(t, o.cli, "/b", 12)
	putsPast(t, o.cli, "/bulk", o.tail[len(o.tail)-1]+1000)
	return o
}
