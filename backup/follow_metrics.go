package backup

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// FollowerMetrics turns follower events into Prometheus series. It is a
// FollowObserver and a prometheus.Collector: set it as a Follower's
// Observer (or among several with FollowObservers) and register it on the
// host's registry. Series are labelled by cluster, and by destination for
// what happens to one target. A segment is committed when a first target
// holds it; a target behind catches up on its own.
//
//	etcdbackup_follower_lag_revisions{cluster}                 gauge: etcd's head minus the last committed revision
//	etcdbackup_follower_lag_seconds{cluster}                   gauge: how long the oldest revision not yet committed was known (FollowEvent.Lag)
//	etcdbackup_follower_committed_revision{cluster}            gauge
//	etcdbackup_follower_last_commit_timestamp_seconds{cluster} gauge: alert when it stops moving
//	etcdbackup_follower_segments_total{cluster}                counter
//	etcdbackup_follower_segment_bytes_total{cluster}           counter, stored bytes per target
//	etcdbackup_follower_chain_segments{cluster}                gauge: segments of the current chain
//	etcdbackup_follower_gaps_total{cluster}                    counter: chains broken by compaction
//	etcdbackup_follower_segment_failures_total{cluster,destination} counter
//	etcdbackup_follower_destination_behind{cluster,destination}      gauge: 1 while the destination lacks segments others hold
//	etcdbackup_follower_destination_chains_total{cluster,destination} counter: chains started on the destination alone, after it lost revisions
//	etcdbackup_follower_destination_tail_gaps_total{cluster,destination} counter: recovery tails the destination lost revisions of
//	etcdbackup_follower_recovery_tail_revisions{cluster}       gauge: revisions of an old chain's tail a recovery still catches up (0 when none)
//
// While a recovery takes its full backup (RecoveryStarted), the lag in
// revisions is etcd's head minus the old chain's last committed revision;
// once the full backup starts the new chain (ChainStarted with its
// HeadRevision), the lag is the new chain's, and the tail's own backlog is
// the recovery gauge; a tail a follower started again resumes (RecoveryStarted
// on another chain than the one it follows) sets the recovery gauge
// only. A tail that ends short of its full backup for good
// (etcd compacted it, ...) is reported as a gap (ChainGap), and counted
// once, when it ends. A destination that lost revisions of a tail the
// others store (TargetLost on the tail's chain) is counted in
// destination_tail_gaps_total: it lacks them until a follower started
// again resumes the tail there.
type FollowerMetrics struct {
	lagRevisions, lagSeconds, committed, chainSegments, lastCommit, behind, recovery *prometheus.GaugeVec
	segments, bytes, gaps, failures, destChains, tailGaps                            *prometheus.CounterVec

	// followed is each cluster's chain followed (ChainStarted,
	// ChainResumed): a recovery's tail resumed on another chain has a
	// backlog, not a lag.
	mu       sync.Mutex
	followed map[string]string
}

var _ interface {
	FollowObserver
	prometheus.Collector
} = (*FollowerMetrics)(nil)

// Follower metric names, for alerting rules and dashboards.
const (
	MetricFollowerLagRevisions  = "etcdbackup_follower_lag_revisions"
	MetricFollowerLagSeconds    = "etcdbackup_follower_lag_seconds"
	MetricFollowerCommitted     = "etcdbackup_follower_committed_revision"
	MetricFollowerLastCommit    = "etcdbackup_follower_last_commit_timestamp_seconds"
	MetricFollowerSegments      = "etcdbackup_follower_segments_total"
	MetricFollowerBytes         = "etcdbackup_follower_segment_bytes_total"
	MetricFollowerChainSegments = "etcdbackup_follower_chain_segments"
	MetricFollowerGaps          = "etcdbackup_follower_gaps_total"
	MetricFollowerFailures      = "etcdbackup_follower_segment_failures_total"
	MetricFollowerBehind        = "etcdbackup_follower_destination_behind"
	MetricFollowerDestChains    = "etcdbackup_follower_destination_chains_total"
	MetricFollowerDestTailGaps  = "etcdbackup_follower_destination_tail_gaps_total"
	MetricFollowerRecoveryTail  = "etcdbackup_follower_recovery_tail_revisions"
)

// NewFollowerMetrics returns unregistered collectors for follower events.
func NewFollowerMetrics() *FollowerMetrics {
	cluster, dest := []string{"cluster"}, []string{"cluster", "destination"}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, cluster)
	}
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	return &FollowerMetrics{
		lagRevisions:  gauge(MetricFollowerLagRevisions, "Revisions etcd is ahead of the last segment committed."),
		lagSeconds:    gauge(MetricFollowerLagSeconds, "Time since etcd first showed the oldest revision of the last segment, or of those not yet committed, at the last commit."),
		committed:     gauge(MetricFollowerCommitted, "Last revision committed on a first target."),
		chainSegments: gauge(MetricFollowerChainSegments, "Segments of the current chain."),
		lastCommit:    gauge(MetricFollowerLastCommit, "Unix time of the last segment committed on a first target."),
		recovery:      gauge(MetricFollowerRecoveryTail, "Revisions of an old chain's tail that a recovery after an outage still catches up in the background."),
		behind: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricFollowerBehind,
			Help: "1 while the destination lacks segments the follower committed on another (it failed and catches up, or lost them)."}, dest),
		segments: counter(MetricFollowerSegments, "Segments committed on a first target.", cluster),
		bytes:    counter(MetricFollowerBytes, "Stored bytes of the segments committed, per target.", cluster),
		gaps:     counter(MetricFollowerGaps, "Chains broken because etcd compacted revisions not yet read.", cluster),
		failures: counter(MetricFollowerFailures, "Failed attempts to store a segment.", dest),
		destChains: counter(MetricFollowerDestChains,
			"Chains started on the destination alone with a full backup, after it lost revisions the follower no longer held.", dest),
		tailGaps: counter(MetricFollowerDestTailGaps,
			"Recovery tails the destination lost revisions of while the others stored them; a follower started again resumes the tail there.", dest),
	}
}

func (m *FollowerMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.lagRevisions, m.lagSeconds, m.committed, m.chainSegments, m.lastCommit, m.behind, m.recovery,
		m.segments, m.bytes, m.gaps, m.failures, m.destChains, m.tailGaps}
}

// Describe implements prometheus.Collector.
func (m *FollowerMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *FollowerMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// ObserveFollow implements FollowObserver.
func (m *FollowerMetrics) ObserveFollow(e FollowEvent) {
	c := e.Cluster
	switch e.Kind {
	case ChainStarted, ChainResumed:
		m.mu.Lock()
		if m.followed == nil {
			m.followed = map[string]string{}
		}
		m.followed[c] = e.Chain
		m.mu.Unlock()
		m.chainSegments.WithLabelValues(c).Set(float64(e.ChainLength))
		m.committed.WithLabelValues(c).Set(float64(e.Revision - 1))
		if e.HeadRevision > 0 {
			// A recovery's new chain: its lag from its full backup on.
			m.lagRevisions.WithLabelValues(c).Set(float64(max(e.HeadRevision-e.Committed, 0)))
			m.lagSeconds.WithLabelValues(c).Set(e.Lag.Seconds())
		}
	case SegmentCommitted:
		m.segments.WithLabelValues(c).Inc()
		m.chainSegments.WithLabelValues(c).Set(float64(e.ChainLength))
		m.committed.WithLabelValues(c).Set(float64(e.Committed))
		m.lastCommit.WithLabelValues(c).Set(float64(e.Time.UnixNano()) / 1e9)
		m.lagSeconds.WithLabelValues(c).Set(e.Lag.Seconds())
		m.lagRevisions.WithLabelValues(c).Set(float64(max(e.HeadRevision-e.Committed, 0)))
	case SegmentStored:
		m.bytes.WithLabelValues(c).Add(float64(e.StoredBytes))
	case SegmentFailed:
		m.failures.WithLabelValues(c, e.Destination).Inc()
	case TargetBehind, TargetLost:
		if e.Kind == TargetLost && e.Chain != "" {
			// Of a recovery's tail: the chain followed goes on there.
			m.tailGaps.WithLabelValues(c, e.Destination).Inc()
			break
		}
		m.behind.WithLabelValues(c, e.Destination).Set(1)
	case TargetRestarted:
		m.destChains.WithLabelValues(c, e.Destination).Inc()
	case TargetCaughtUp:
		m.behind.WithLabelValues(c, e.Destination).Set(0)
	case ChainGap, ChainRewound:
		m.gaps.WithLabelValues(c).Inc()
	case RecoveryStarted:
		m.mu.Lock()
		followed := m.followed[c] == e.Chain
		m.mu.Unlock()
		if followed { // not a tail resumed: the chain followed is behind
			m.lagRevisions.WithLabelValues(c).Set(float64(max(e.HeadRevision-e.Committed, 0)))
			m.lagSeconds.WithLabelValues(c).Set(e.Lag.Seconds())
		}
		m.recovery.WithLabelValues(c).Set(float64(max(e.HeadRevision-e.Committed, 0)))
	case RecoverySegmentCommitted:
		m.recovery.WithLabelValues(c).Set(float64(max(e.HeadRevision-e.Committed, 0)))
	case RecoveryDone:
		m.recovery.WithLabelValues(c).Set(0)
	}
}

// FollowObservers fans follower events out to several observers, in order.
type FollowObservers []FollowObserver

// ObserveFollow implements FollowObserver.
func (os FollowObservers) ObserveFollow(e FollowEvent) {
	for _, o := range os {
		if o != nil {
			o.ObserveFollow(e)
		}
	}
}
