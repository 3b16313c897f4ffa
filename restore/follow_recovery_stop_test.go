package restore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/restore"
)

// seenGate is a gatedTail that records a commit of the tail waiting.
type seenGate struct {
	gatedTail
	seen atomic.Bool
}

func (u *seenGate) Commit(ctx context.Context, m *backup.Manifest) error {
	if m.IsDelta() && m.Chain == u.chain && m.FirstRevision >= u.from {
		u.seen.Store(true)
	}
	return u.gatedTail.Commit(ctx, m)
}

// TestFollowerStoppedMidRecovery: a follower stopped while its recovery's
// tail cannot commit stops within its FinalCommitTimeout, reports the tail
// ended short (RecoveryDone with an error) before Run returns, and reports
// nothing after: no tail outlives Run. The tail's revisions not stored are
// refused as a gap, never restored from another state. Started again, the
// follower resumes that tail (RecoveryStarted on the old chain) and its
// revisions restore exactly.
func TestFollowerStoppedMidRecovery(t *testing.T) {
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

	rec = &followEvents{}
	f := recoveryFollower(t, etcd, b, rec)
	f.FinalCommitTimeout = 2 * time.Second
	gate := &seenGate{gatedTail: gatedTail{inner: f.Targets[0].Uploader, chain: oldChain.Chain, from: oldEnd + 1, gate: make(chan struct{})}}
	f.Targets[0].Uploader = gate
	stop = runFollower(t, f)
	require.Eventually(t, gate.seen.Load, 30*time.Second, 10*time.Millisecond, "a tail segment waits at the gate: %v", rec.kinds())
	require.Zero(t, rec.count(backup.RecoveryDone), "the tail is held back")
	// The new chain has a segment: a follower started again follows it.
	d := workload(t, cli, "/d", 6)
	waitCommitted(t, rec, d[len(d)-1])

	stopping := time.Now()
	require.NoError(t, stop())
	require.Less(t, time.Since(stopping), 20*time.Second, "the tail stops within the stop budget")
	done, ok := rec.first(backup.RecoveryDone)
	require.True(t, ok, "the tail ended before Run returned: %v", rec.kinds())
	require.Error(t, done.Err)
	n := len(rec.kinds())
	close(gate.gate) // a tail still running would commit now
	time.Sleep(200 * time.Millisecond)
	require.Len(t, rec.kinds(), n, "no event after Run returned")

	_, err := restore.FindPoint(t.Context(), []restore.Source{{Name: "mem", Catalog: b}}, restore.Point{Cluster: "prod-a", Revision: tail[3]})
	require.ErrorIs(t, err, restore.ErrNoChain, "a revision of the tail not stored")
	restored, res, srv := restorePoint(t, b, restore.Point{Cluster: "prod-a", Revision: oldEnd})
	require.Equal(t, oldEnd, res.Revision)
	requireSameAt(t, cli, restored, oldEnd)
	srv.Stop()

	// Started again, the follower resumes the tail it was stopped in,
	// from the old chain's last segment, and catches it up.
	rec = &followEvents{}
	stop = runFollower(t, recoveryFollower(t, etcd, b, rec))
	require.Eventually(t, func() bool { return rec.count(backup.RecoveryDone) == 1 }, 30*time.Second, 10*time.Millisecond,
		"events: %v", rec.kinds())
	require.NoError(t, stop())
	started, ok := rec.first(backup.RecoveryStarted)
	require.True(t, ok, "events: %v", rec.kinds())
	require.Equal(t, oldChain.Chain, started.Chain)
	require.Equal(t, done.Committed+1, started.Revision)
	done, _ = rec.first(backup.RecoveryDone)
	require.NoError(t, done.Err)
	for _, rev := range []int64{oldEnd + 1, tail[3], tail[len(tail)-1]} {
		restored, res, srv := restorePoint(t, b, restore.Point{Cluster: "prod-a", Revision: rev})
		require.Equal(t, rev, res.Revision)
		requireSameAt(t, cli, restored, rev)
		srv.Stop()
	}
}
