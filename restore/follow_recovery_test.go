package restore_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/restore"
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
