package restore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// TestFollowerOldGapIsNoRecovery: a chain started after a compaction gap
// (ChainGap, counted once) has a hole before its full backup that no
// recovery left: a follower started again on it, twice, resumes no tail,
// reports no RecoveryStarted nor RecoveryDone, and counts no new gap.
func TestFollowerOldGapIsNoRecovery(t *testing.T) {
	b := memBucket(t)
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)

	rec := &followEvents{}
	stop := runFollower(t, recoveryFollower(t, etcd, b, rec))
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	a := workload(t, cli, "/a", 6)
	waitCommitted(t, rec, a[len(a)-1])
	require.NoError(t, stop())

	gap := workload(t, cli, "/gap", 6)
	_, err := cli.Compact(t.Context(), gap[len(gap)-1])
	require.NoError(t, err)

	rec = &followEvents{}
	stop = runFollower(t, recoveryFollower(t, etcd, b, rec))
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, rec.count(backup.ChainGap), "events: %v", rec.kinds())
	c := workload(t, cli, "/c", 6)
	waitCommitted(t, rec, c[len(c)-1])
	require.NoError(t, stop())

	for range 2 {
		rec = &followEvents{}
		metrics := backup.NewFollowerMetrics()
		stop = runFollower(t, recoveryFollower(t, etcd, b, backup.FollowObservers{rec, metrics}))
		d := workload(t, cli, "/d", 3)
		waitCommitted(t, rec, d[len(d)-1])
		require.NoError(t, stop())
		require.Zero(t, rec.count(backup.RecoveryStarted), "events: %v", rec.kinds())
		require.Zero(t, rec.count(backup.RecoveryDone), "events: %v", rec.kinds())
		require.NoError(t, testutil.CollectAndCompare(metrics, strings.NewReader(""), backup.MetricFollowerGaps), "no gap counted")
	}
}

// TestFollowerTailCompactedIsOneGap: a follower stopped mid-recovery,
// while etcd compacts the tail it had not stored, reports on its next
// start that the tail ended short (RecoveryDone with ErrCompacted) and
// the gap as a compaction gap of the old chain: one ChainGap, counted
// once. Started again after its new chain stored a segment, it reports
// neither again.
func TestFollowerTailCompactedIsOneGap(t *testing.T) {
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
	head := putsPast(t, cli, "/bulk", oldEnd+1000)

	rec = &followEvents{}
	f := recoveryFollower(t, etcd, b, rec)
	f.FinalCommitTimeout = 2 * time.Second
	gate := &seenGate{gatedTail: gatedTail{inner: f.Targets[0].Uploader, chain: oldChain.Chain, from: oldEnd + 1, gate: make(chan struct{})}}
	defer close(gate.gate)
	f.Targets[0].Uploader = gate
	stop = runFollower(t, f)
	require.Eventually(t, gate.seen.Load, 30*time.Second, 10*time.Millisecond, "events: %v", rec.kinds())
	d := workload(t, cli, "/d", 3)
	waitCommitted(t, rec, d[len(d)-1])
	require.NoError(t, stop())
	_, err := cli.Compact(t.Context(), head)
	require.NoError(t, err)

	for round := range 2 {
		rec = &followEvents{}
		metrics := backup.NewFollowerMetrics()
		stop = runFollower(t, recoveryFollower(t, etcd, b, backup.FollowObservers{rec, metrics}))
		if round == 0 {
			require.Eventually(t, func() bool { return rec.count(backup.RecoveryDone) == 1 }, 30*time.Second, 10*time.Millisecond)
		}
		e := workload(t, cli, "/e", 3)
		waitCommitted(t, rec, e[len(e)-1])
		require.NoError(t, stop())
		want := ""
		if round == 0 {
			done, _ := rec.first(backup.RecoveryDone)
			require.ErrorIs(t, done.Err, backup.ErrCompacted)
			require.Equal(t, 1, rec.count(backup.ChainGap), "events: %v", rec.kinds())
			g, _ := rec.first(backup.ChainGap)
			require.Equal(t, oldChain.Chain, g.Chain)
			require.Equal(t, oldEnd+1, g.Revision)
			want = `
# HELP etcdbackup_follower_gaps_total Chains broken because etcd compacted revisions not yet read.
# TYPE etcdbackup_follower_gaps_total counter
etcdbackup_follower_gaps_total{cluster="prod-a"} 1
`
		} else {
			require.Zero(t, rec.count(backup.RecoveryStarted), "events: %v", rec.kinds())
			require.Zero(t, rec.count(backup.ChainGap), "events: %v", rec.kinds())
		}
		require.NoError(t, testutil.CollectAndCompare(metrics, strings.NewReader(want), backup.MetricFollowerGaps))
	}
}
