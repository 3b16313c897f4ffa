package backup_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
)

func TestFollowerMetrics(t *testing.T) {
	m := backup.NewFollowerMetrics()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	for _, e := range []backup.FollowEvent{
		{Kind: backup.ChainResumed, Cluster: "prod-a", Revision: 101, ChainLength: 4},
		{Kind: backup.SegmentFailed, Cluster: "prod-a", Destination: "s3", HeadRevision: 130, Committed: 100, Err: errors.New("down")},
		{Kind: backup.SegmentCommitted, Cluster: "prod-a", Time: time.Unix(1700000000, 500_000_000), Revision: 101, Committed: 120, HeadRevision: 125, ChainLength: 5,
			Lag: 1500 * time.Millisecond, StoredBytes: 1000, Manifests: make([]*backup.Manifest, 1)},
		{Kind: backup.SegmentStored, Cluster: "prod-a", Destination: "gcs", StoredBytes: 1000},
		{Kind: backup.SegmentStored, Cluster: "prod-a", Destination: "s3", StoredBytes: 1000},
		{Kind: backup.ChainGap, Cluster: "prod-a", Revision: 121},
		{Kind: backup.TargetBehind, Cluster: "prod-a", Destination: "s3", Revision: 101},
		{Kind: backup.TargetBehind, Cluster: "prod-a", Destination: "gcs", Revision: 101},
		{Kind: backup.TargetLost, Cluster: "prod-a", Destination: "gcs", Revision: 101},
		{Kind: backup.TargetRestarted, Cluster: "prod-a", Destination: "gcs", Revision: 140},
		{Kind: backup.TargetCaughtUp, Cluster: "prod-a", Destination: "s3", Committed: 120},
	} {
		m.ObserveFollow(e)
	}
	want := `
# HELP etcdbackup_follower_chain_segments Segments of the current chain.
# TYPE etcdbackup_follower_chain_segments gauge
etcdbackup_follower_chain_segments{cluster="prod-a"} 5
# HELP etcdbackup_follower_committed_revision Last revision committed on a first target.
# TYPE etcdbackup_follower_committed_revision gauge
etcdbackup_follower_committed_revision{cluster="prod-a"} 120
# HELP etcdbackup_follower_destination_behind 1 while the destination lacks segments the follower committed on another (it failed and catches up, or lost them).
# TYPE etcdbackup_follower_destination_behind gauge
etcdbackup_follower_destination_behind{cluster="prod-a",destination="gcs"} 1
etcdbackup_follower_destination_behind{cluster="prod-a",destination="s3"} 0
# HELP etcdbackup_follower_destination_chains_total Chains started on the destination alone with a full backup, after it lost revisions the follower no longer held.
# TYPE etcdbackup_follower_destination_chains_total counter
etcdbackup_follower_destination_chains_total{cluster="prod-a",destination="gcs"} 1
# HELP etcdbackup_follower_gaps_total Chains broken because etcd compacted revisions not yet read.
# TYPE etcdbackup_follower_gaps_total counter
etcdbackup_follower_gaps_total{cluster="prod-a"} 1
# HELP etcdbackup_follower_last_commit_timestamp_seconds Unix time of the last segment committed on a first target.
# TYPE etcdbackup_follower_last_commit_timestamp_seconds gauge
etcdbackup_follower_last_commit_timestamp_seconds{cluster="prod-a"} 1.7000000005e+09
# HELP etcdbackup_follower_lag_revisions Revisions etcd is ahead of the last segment committed.
# TYPE etcdbackup_follower_lag_revisions gauge
etcdbackup_follower_lag_revisions{cluster="prod-a"} 5
# HELP etcdbackup_follower_lag_seconds Time since etcd first showed the oldest revision of the last segment, or of those not yet committed, at the last commit.
# TYPE etcdbackup_follower_lag_seconds gauge
etcdbackup_follower_lag_seconds{cluster="prod-a"} 1.5
# HELP etcdbackup_follower_segment_bytes_total Stored bytes of the segments committed, per target.
# TYPE etcdbackup_follower_segment_bytes_total counter
etcdbackup_follower_segment_bytes_total{cluster="prod-a"} 2000
# HELP etcdbackup_follower_segment_failures_total Failed attempts to store a segment.
# TYPE etcdbackup_follower_segment_failures_total counter
etcdbackup_follower_segment_failures_total{cluster="prod-a",destination="s3"} 1
# HELP etcdbackup_follower_segments_total Segments committed on a first target.
# TYPE etcdbackup_follower_segments_total counter
etcdbackup_follower_segments_total{cluster="prod-a"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want)))
}

// TestFollowerMetricsDuringRecovery: a recovery's start shows how far
// behind the follower is; the tail's commits move the recovery gauge,
// never the chain's committed revision or lag; a tail cut short by
// compaction is a gap.
func TestFollowerMetricsDuringRecovery(t *testing.T) {
	m := backup.NewFollowerMetrics()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	gauge := func(name string) float64 {
		fams, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range fams {
			if f.GetName() == name {
				if c := f.GetMetric()[0].GetCounter(); c != nil {
					return c.GetValue()
				}
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	m.ObserveFollow(backup.FollowEvent{Kind: backup.ChainResumed, Cluster: "prod-a", Revision: 101})
	m.ObserveFollow(backup.FollowEvent{Kind: backup.RecoveryStarted, Cluster: "prod-a", Revision: 101, Committed: 100,
		HeadRevision: 300100, Lag: 2 * time.Second})
	require.Equal(t, 300000.0, gauge(backup.MetricFollowerLagRevisions))
	require.Equal(t, 2.0, gauge(backup.MetricFollowerLagSeconds))
	require.Equal(t, 300000.0, gauge(backup.MetricFollowerRecoveryTail))
	// The new full is committed: the lag is the new chain's from there,
	// before its first segment.
	m.ObserveFollow(backup.FollowEvent{Kind: backup.ChainStarted, Cluster: "prod-a", Revision: 300201, Committed: 300200,
		HeadRevision: 300230, Lag: 4 * time.Second})
	require.Equal(t, 30.0, gauge(backup.MetricFollowerLagRevisions))
	require.Equal(t, 4.0, gauge(backup.MetricFollowerLagSeconds))
	require.Equal(t, 300200.0, gauge(backup.MetricFollowerCommitted))
	m.ObserveFollow(backup.FollowEvent{Kind: backup.SegmentCommitted, Cluster: "prod-a", Revision: 300201, Committed: 300250,
		HeadRevision: 300260, Lag: 300 * time.Millisecond})
	m.ObserveFollow(backup.FollowEvent{Kind: backup.RecoverySegmentCommitted, Cluster: "prod-a", Revision: 101, Committed: 1100,
		HeadRevision: 300200, Lag: time.Minute})
	require.Equal(t, 300250.0, gauge(backup.MetricFollowerCommitted))
	require.Equal(t, 10.0, gauge(backup.MetricFollowerLagRevisions))
	require.Equal(t, 0.3, gauge(backup.MetricFollowerLagSeconds))
	require.Equal(t, 299100.0, gauge(backup.MetricFollowerRecoveryTail))
	// A tail etcd compacted: its gap reported (once) as a compaction gap.
	m.ObserveFollow(backup.FollowEvent{Kind: backup.ChainGap, Cluster: "prod-a", Revision: 1101, Err: backup.ErrCompacted})
	m.ObserveFollow(backup.FollowEvent{Kind: backup.RecoveryDone, Cluster: "prod-a", Committed: 1100, HeadRevision: 300200,
		Err: backup.ErrCompacted})
	require.Zero(t, gauge(backup.MetricFollowerRecoveryTail))
	require.Equal(t, 1.0, gauge(backup.MetricFollowerGaps))
}

// TestFollowerMetricsResumedTail: a follower started again mid-recovery
// resumes its chain, then the old chain's tail (RecoveryStarted on the
// old chain): the tail's backlog is the recovery gauge, never the lag of
// the chain followed.
func TestFollowerMetricsResumedTail(t *testing.T) {
	m := backup.NewFollowerMetrics()
	m.ObserveFollow(backup.FollowEvent{Kind: backup.ChainResumed, Cluster: "prod-a", Chain: "new", Revision: 300301})
	m.ObserveFollow(backup.FollowEvent{Kind: backup.SegmentCommitted, Cluster: "prod-a", Chain: "new", Committed: 300400,
		HeadRevision: 300402, Lag: 200 * time.Millisecond})
	m.ObserveFollow(backup.FollowEvent{Kind: backup.RecoveryStarted, Cluster: "prod-a", Chain: "old", Revision: 101, Committed: 100,
		HeadRevision: 300100})
	require.NoError(t, testutil.CollectAndCompare(m, strings.NewReader(`
# HELP etcdbackup_follower_lag_revisions Revisions etcd is ahead of the last segment committed.
# TYPE etcdbackup_follower_lag_revisions gauge
etcdbackup_follower_lag_revisions{cluster="prod-a"} 2
`), backup.MetricFollowerLagRevisions))
}

// TestFollowerMetricsTailLostTarget: a destination that lost revisions of
// a recovery's tail the others store (TargetLost on the tail's chain) is
// counted on that destination; it is not behind on the chain followed,
// and the tail, which reached its end on the others, broke no chain.
func TestFollowerMetricsTailLostTarget(t *testing.T) {
	m := backup.NewFollowerMetrics()
	m.ObserveFollow(backup.FollowEvent{Kind: backup.TargetLost, Cluster: "prod-a", Chain: "old", Destination: "y", Revision: 120,
		Err: errors.New("revisions left its backlog")})
	m.ObserveFollow(backup.FollowEvent{Kind: backup.RecoveryDone, Cluster: "prod-a", Chain: "old", Revision: 101, Committed: 300100,
		HeadRevision: 300100, Destinations: []string{"y"}, Err: backup.ErrTailIncomplete})
	require.NoError(t, testutil.CollectAndCompare(m, strings.NewReader(`
# HELP etcdbackup_follower_destination_tail_gaps_total Recovery tails the destination lost revisions of while the others stored them; a follower started again resumes the tail there.
# TYPE etcdbackup_follower_destination_tail_gaps_total counter
etcdbackup_follower_destination_tail_gaps_total{cluster="prod-a",destination="y"} 1
`), backup.MetricFollowerDestTailGaps, backup.MetricFollowerBehind, backup.MetricFollowerGaps))
}
