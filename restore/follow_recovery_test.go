package restore_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
)

// recoveryFollower is a follower of etcd into b that recovers when more
// than 300 revisions behind, with small segments (the tail is several).
func recoveryFollower(t *testing.T, etcd *etcdtest.Server, b storage.Bucket, rec backup.FollowObserver) *backup.Follower {
	f := destinationsFollower(t, etcd, rec, map[string]storage.Bucket{"d": b}, "d")
	f.RecoveryRevisions, f.MaxSegmentBytes = 300, 16<<10
	return f
}

// kinds returns the kinds of the events recorded, in order.
func (f *followEvents) kinds() []backup.FollowEventKind {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []backup.FollowEventKind
	for _, e := range f.events {
		out = append(out, e.Kind)
	}
	return out
}

// first returns the first event of kind recorded.
func (f *followEvents) first(kind backup.FollowEventKind) (backup.FollowEvent, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.events {
		if e.Kind == kind {
			return e, true
		}
	}
	return backup.FollowEvent{}, false
}

// TestFollowerRecoversFarBehind: a follower stopped while etcd took about
// 2,000 revisions resumes more than RecoveryRevisions behind. It protects
// the head first: a new full backup at or past the head it saw at start,
// committed (ChainStarted) before the old chain's tail is complete
// (RecoveryDone), which the tail catches up to the full's revision in the
// background. Then revisions in the old tail, at the full and after it
// restore exactly as etcd served them, leases included, on a file
// destination and on MinIO.
func TestFollowerRecoversFarBehind(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bucket func(t *testing.T) storage.Bucket
	}{
		{"file", func(t *testing.T) storage.Bucket { b, _ := fileBucket(t); return b }},
		{"minio", func(t *testing.T) storage.Bucket {
			srv := miniotest.Start(t)
			return newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{}))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.bucket(t)
			etcd := etcdtest.Start(t)
			cli := etcd.Client(t)

			rec := &followEvents{}
			stop := runFollower(t, recoveryFollower(t, etcd, b, rec))
			require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
			a := workload(t, cli, "/a", 12)
			waitCommitted(t, rec, a[len(a)-1])
			require.NoError(t, stop())
			oldEnd := rec.committed()

			// The follower is stopped while etcd goes on.
			tail := workload(t, cli, "/b", 18)
			bulk := putsPast(t, cli, "/bulk", tail[len(tail)-1]+2000)
			tail = append(tail, workload(t, cli, "/c", 12)...)
			head := tail[len(tail)-1]

			rec = &followEvents{}
			stop = runFollower(t, recoveryFollower(t, etcd, b, rec))
			require.Eventually(t, func() bool { return rec.count(backup.RecoveryDone) == 1 }, 30*time.Second, 10*time.Millisecond,
				"events: %v", rec.kinds())
			after := workload(t, cli, "/d", 12)
			waitCommitted(t, rec, after[len(after)-1])
			require.NoError(t, stop())

			kinds := rec.kinds()
			started, ok := rec.first(backup.RecoveryStarted)
			require.True(t, ok, "no recovery: %v", kinds)
			require.Equal(t, oldEnd+1, started.Revision)
			require.GreaterOrEqual(t, started.HeadRevision, head)
			full, _ := rec.first(backup.ChainStarted)
			done, _ := rec.first(backup.RecoveryDone)
			require.Less(t, slices.Index(kinds, backup.ChainStarted), slices.Index(kinds, backup.RecoverySegmentCommitted),
				"the new full is committed before the old tail's first segment: %v", kinds)
			require.Less(t, slices.Index(kinds, backup.ChainStarted), slices.Index(kinds, backup.RecoveryDone), "%v", kinds)
			fullRev := full.Revision - 1
			require.GreaterOrEqual(t, fullRev, head, "the full protects the head seen at start")
			require.NoError(t, done.Err)
			require.GreaterOrEqual(t, done.Committed, fullRev, "the tail reaches the full's revision")
			require.Equal(t, []backup.FollowEventKind{backup.ChainResumed, backup.RecoveryStarted}, kinds[:2])

			for _, rev := range []int64{oldEnd + 1, tail[5], bulk, tail[len(tail)-1], fullRev, after[3], after[len(after)-1]} {
				restored, res, srv := restorePoint(t, b, restore.Point{Cluster: "prod-a", Revision: rev})
				require.Equal(t, rev, res.Revision)
				requireSameAt(t, cli, restored, rev)
				srv.Stop()
			}
		})
	}
}

// gatedTail stores through inner, holding the commits of the segments of
// chain from revision from on until gate is closed.
type gatedTail struct {
	inner backup.Uploader
	chain string
	from  int64
	gate  chan struct{}
}

func (u *gatedTail) Upload(ctx context.Context, m *backup.Manifest, r io.Reader) error {
	return u.inner.Upload(ctx, m, r)
}

func (u *gatedTail) Commit(ctx context.Context, m *backup.Manifest) error {
	if m.IsDelta() && m.Chain == u.chain && m.FirstRevision >= u.from {
		select {
		case <-u.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return u.inner.Commit(ctx, m)
}

// TestFollowerRecoveryRestorePoints: while the old chain's tail is held
// back, the restore points are the old chain up to its last segment and
// the new full backup onward; a revision between is refused as a gap
// (ErrNoChain), never restored from another state. Retention with a
// point-in-time window, run meanwhile, keeps the old chain's full backup
// and segments: once the tail is stored, its revisions restore exactly.
func TestFollowerRecoveryRestorePoints(t *testing.T) {
	b := memBucket(t)
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)

	rec := &followEvents{}
	stop := runFollower(t, recoveryFollower(t, etcd, b, rec))
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	oldChain, _ := rec.first(backup.ChainStarted)
	a := workload(t, cli, "/a", 6)
	waitCommitted(t, rec, a[len(a)-1])
	require.NoError(t, stop())
	oldEnd := rec.committed()

	tail := workload(t, cli, "/b", 12)
	putsPast(t, cli, "/bulk", tail[len(tail)-1]+1000)
	tail = append(tail, workload(t, cli, "/c", 6)...)

	rec = &followEvents{}
	f := recoveryFollower(t, etcd, b, rec)
	gate := &gatedTail{inner: f.Targets[0].Uploader, chain: oldChain.Chain, from: oldEnd + 1, gate: make(chan struct{})}
	f.Targets[0].Uploader = gate
	stop = runFollower(t, f)
	defer func() { _ = stop() }()
	// Written once the new chain follows: before, they are in its full.
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	after := workload(t, cli, "/d", 6)
	waitCommitted(t, rec, after[len(after)-1])
	full, ok := rec.first(backup.ChainStarted)
	require.True(t, ok)
	// The new chain restores from the full backup's upper revision on
	// (writes ran while it was taken).
	var fullRev int64
	entries, err := backup.ListBackups(t.Context(), b, "prod-a")
	require.NoError(t, err)
	for _, e := range entries {
		if e.ID == full.Chain {
			fullRev = e.Manifest.Etcd.Revision.High
			require.Equal(t, &backup.RecoveryTail{Chain: oldChain.Chain, Until: fullRev}, e.Manifest.Recovery,
				"the recovery's full backup records the tail (retention keeps its chain)")
		}
	}
	require.Positive(t, fullRev)
	require.Zero(t, rec.count(backup.RecoveryDone), "the tail is held back")

	_, err = restore.FindPoint(t.Context(), []restore.Source{{Name: "mem", Catalog: b}}, restore.Point{Cluster: "prod-a", Revision: tail[3]})
	require.ErrorIs(t, err, restore.ErrNoChain, "a revision of the tail not yet stored")
	for _, rev := range []int64{oldEnd, fullRev, after[len(after)-1]} {
		restored, res, srv := restorePoint(t, b, restore.Point{Cluster: "prod-a", Revision: rev})
		require.Equal(t, rev, res.Revision)
		requireSameAt(t, cli, restored, rev)
		srv.Stop()
	}

	p := &retention.Pruner{Store: b, Destination: "d", Policy: retention.KeepLast(1), Chains: &retention.ChainPolicy{Window: time.Minute}}
	_, err = p.Prune(t.Context(), "prod-a")
	require.NoError(t, err)

	close(gate.gate)
	require.Eventually(t, func() bool { return rec.count(backup.RecoveryDone) == 1 }, 30*time.Second, 10*time.Millisecond)
	done, _ := rec.first(backup.RecoveryDone)
	require.NoError(t, done.Err)
	for _, rev := range []int64{oldEnd + 1, tail[3], tail[len(tail)-1]} {
		restored, res, srv := restorePoint(t, b, restore.Point{Cluster: "prod-a", Revision: rev})
		require.Equal(t, rev, res.Revision)
		requireSameAt(t, cli, restored, rev)
		srv.Stop()
	}
}

// flakyUploader fails every call while down is set.
type flakyUploader struct {
	inner backup.Uploader
	down  atomic.Bool
}

func (u *flakyUploader) Upload(ctx context.Context, m *backup.Manifest, r io.Reader) error {
	if u.down.Load() {
		return errors.New("destination down")
	}
	return u.inner.Upload(ctx, m, r)
}

func (u *flakyUploader) Commit(ctx context.Context, m *backup.Manifest) error {
	if u.down.Load() {
		return errors.New("destination down")
	}
	return u.inner.Commit(ctx, m)
}

// TestFollowerRecoversAfterDestinationOutage: the destination is down
// while etcd takes more than RecoveryRevisions revisions; once it answers,
// the running follower takes a full backup first (RecoveryStarted, then
// ChainStarted before RecoveryDone), catches its chain's tail up in the
// background, and every revision of the outage restores exactly.
func TestFollowerRecoversAfterDestinationOutage(t *testing.T) {
	b := memBucket(t)
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)

	rec := &followEvents{}
	f := recoveryFollower(t, etcd, b, rec)
	flaky := &flakyUploader{inner: f.Targets[0].Uploader}
	f.Targets[0].Uploader = flaky
	stop := runFollower(t, f)
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	a := workload(t, cli, "/a", 6)
	waitCommitted(t, rec, a[len(a)-1])

	flaky.down.Store(true)
	outage := workload(t, cli, "/b", 12)
	require.Eventually(t, func() bool { return rec.count(backup.SegmentFailed) > 0 }, 30*time.Second, 10*time.Millisecond)
	putsPast(t, cli, "/bulk", outage[len(outage)-1]+1000)
	outage = append(outage, workload(t, cli, "/c", 6)...)
	flaky.down.Store(false)

	require.Eventually(t, func() bool { return rec.count(backup.RecoveryDone) == 1 }, 30*time.Second, 10*time.Millisecond)
	after := workload(t, cli, "/d", 6)
	waitCommitted(t, rec, after[len(after)-1])
	require.NoError(t, stop())
	kinds := rec.kinds()
	require.Equal(t, 1, rec.count(backup.RecoveryStarted), "%v", kinds)
	require.Equal(t, 2, rec.count(backup.ChainStarted), "%v", kinds)
	require.Less(t, slices.Index(kinds, backup.RecoveryStarted), slices.Index(kinds, backup.RecoveryDone))
	require.Less(t, slices.Index(slices.Clip(kinds[slices.Index(kinds, backup.RecoveryStarted):]), backup.ChainStarted),
		slices.Index(slices.Clip(kinds[slices.Index(kinds, backup.RecoveryStarted):]), backup.RecoveryDone), "%v", kinds)
	done, _ := rec.first(backup.RecoveryDone)
	require.NoError(t, done.Err)
	for _, rev := range []int64{outage[0], outage[5], outage[len(outage)-1], after[len(after)-1]} {
		restored, res, srv := restorePoint(t, b, restore.Point{Cluster: "prod-a", Revision: rev})
		require.Equal(t, rev, res.Revision)
		requireSameAt(t, cli, restored, rev)
		srv.Stop()
	}
}

// refusedTail refuses the segments of chain from revision from on.
type refusedTail struct {
	inner backup.Uploader
	chain string
	from  int64
}

func (u *refusedTail) refused(m *backup.Manifest) bool {
	return m.IsDelta() && m.Chain == u.chain && m.FirstRevision >= u.from
}

func (u *refusedTail) Upload(ctx context.Context, m *backup.Manifest, r io.Reader) error {
	if u.refused(m) {
		return errors.New("destination refuses the segment")
	}
	return u.inner.Upload(ctx, m, r)
}

func (u *refusedTail) Commit(ctx context.Context, m *backup.Manifest) error {
	if u.refused(m) {
		return errors.New("destination refuses the segment")
	}
	return u.inner.Commit(ctx, m)
}

// TestFollowerRecoveryNewChainWhileTailCannotStore: while the old chain's
// tail cannot store (its commits wait, or the destination refuses them),
// the new chain commits every write made after it started, round after
// round, and its newest revision restores exactly.
func TestFollowerRecoveryNewChainWhileTailCannotStore(t *testing.T) {
	for _, mode := range []string{"blocked", "refused"} {
		t.Run(mode, func(t *testing.T) {
			b := memBucket(t)
			etcd := etcdtest.Start(t)
			cli := etcd.Client(t)

			rec := &followEvents{}
			stop := runFollower(t, recoveryFollower(t, etcd, b, rec))
			require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
			oldChain, _ := rec.first(backup.ChainStarted)
			a := workload(t, cli, "/a", 6)
			waitCommitted(t, rec, a[len(a)-1])
			require.NoError(t, stop())
			oldEnd := rec.committed()
			putsPast(t, cli, "/bulk", a[len(a)-1]+3000)

			rec = &followEvents{}
			f := recoveryFollower(t, etcd, b, rec)
			f.FinalCommitTimeout = 2 * time.Second
			gate := make(chan struct{})
			defer close(gate)
			if mode == "blocked" {
				f.Targets[0].Uploader = &gatedTail{inner: f.Targets[0].Uploader, chain: oldChain.Chain, from: oldEnd + 1, gate: gate}
			} else {
				f.Targets[0].Uploader = &refusedTail{inner: f.Targets[0].Uploader, chain: oldChain.Chain, from: oldEnd + 1}
			}
			stop = runFollower(t, f)
			defer func() { _ = stop() }()
			require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
			var last int64
			for round := range 3 {
				revs := workload(t, cli, "/d"+strconv.Itoa(round), 6)
				last = revs[len(revs)-1]
				waitCommitted(t, rec, last)
			}
			_, ok := rec.first(backup.RecoverySegmentCommitted)
			require.False(t, ok, "the tail stored nothing")
			restored, res, srv := restorePoint(t, b, restore.Point{Cluster: "prod-a", Revision: last})
			require.Equal(t, last, res.Revision)
			requireSameAt(t, cli, restored, last)
			srv.Stop()
		})
	}
}
