package backup

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/etcdbackup/etcdbackup/storage"
)

// Metrics turns backup events into Prometheus series. It is an Observer and
// a prometheus.Collector: add it to a pipeline's observers and register it
// on the host's registry. Series are labelled by cluster and destination
// name only, never by anything secret.
//
// The series:
//
//	etcdbackup_backup_last_success_timestamp_seconds{cluster,destination}  gauge
//	etcdbackup_backup_duration_seconds{cluster,destination}                histogram
//	etcdbackup_backup_stored_bytes{cluster,destination}                    gauge, last backup
//	etcdbackup_backup_raw_bytes{cluster}                                   gauge, last snapshot
//	etcdbackup_backup_success_total{cluster,destination}                   counter
//	etcdbackup_backup_failures_total{cluster,destination}                  counter
//	etcdbackup_backup_failure_reasons_total{cluster,destination,reason}    counter (see FailureReason)
//	etcdbackup_backups_in_flight{cluster}                                  gauge
type Metrics struct {
	lastSuccess *prometheus.GaugeVec
	duration    *prometheus.HistogramVec
	storedBytes *prometheus.GaugeVec
	rawBytes    *prometheus.GaugeVec
	successes   *prometheus.CounterVec
	failures    *prometheus.CounterVec
	reasons     *prometheus.CounterVec
	inFlight    *prometheus.GaugeVec
}

var _ interface {
	Observer
	prometheus.Collector
} = (*Metrics)(nil)

// Metric names, for alerting rules and dashboards.
const (
	MetricLastSuccess = "etcdbackup_backup_last_success_timestamp_seconds"
	MetricDuration    = "etcdbackup_backup_duration_seconds"
	MetricStoredBytes = "etcdbackup_backup_stored_bytes"
	MetricRawBytes    = "etcdbackup_backup_raw_bytes"
	MetricSuccesses   = "etcdbackup_backup_success_total"
	MetricFailures    = "etcdbackup_backup_failures_total"
	MetricReasons     = "etcdbackup_backup_failure_reasons_total"
	MetricInFlight    = "etcdbackup_backups_in_flight"
)

// NewMetrics returns unregistered collectors for backup events.
func NewMetrics() *Metrics {
	dest := []string{"cluster", "destination"}
	return &Metrics{
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricLastSuccess,
			Help: "Unix time of the last backup committed to the destination.",
		}, dest),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricDuration,
			Help:    "Time from snapshot start to the manifest commit, per destination.",
			Buckets: prometheus.ExponentialBuckets(0.5, 2, 14), // 0.5 s to about 68 min
		}, dest),
		storedBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricStoredBytes,
			Help: "Size of the last stored backup object (compressed, encrypted).",
		}, dest),
		rawBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricRawBytes,
			Help: "Size of the last snapshot as etcd sent it.",
		}, []string{"cluster"}),
		successes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricSuccesses,
			Help: "Backups committed, per destination.",
		}, dest),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricFailures,
			Help: "Backups that did not reach the destination.",
		}, dest),
		reasons: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricReasons,
			Help: "Backups that did not reach the destination, by reason: no-space, permission, missing-bucket, stalled, timeout, canceled, integrity or other.",
		}, []string{"cluster", "destination", "reason"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricInFlight,
			Help: "Backups running now.",
		}, []string{"cluster"}),
	}
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.lastSuccess, m.duration, m.storedBytes, m.rawBytes, m.successes, m.failures, m.reasons, m.inFlight}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// Known creates the counters of a cluster's backups to each destination
// at zero, so that an alert on their rate sees the first failure. The
// first run of a backup does it; a host that knows its jobs before they
// run (a scheduler's Set) calls it then.
func (m *Metrics) Known(cluster string, destinations ...string) {
	m.inFlight.WithLabelValues(cluster).Add(0)
	for _, d := range destinations {
		m.successes.WithLabelValues(cluster, d).Add(0)
		m.failures.WithLabelValues(cluster, d).Add(0)
	}
}

// Observe implements Observer.
func (m *Metrics) Observe(e Event) {
	switch e.Kind {
	case Started:
		m.inFlight.WithLabelValues(e.Cluster).Inc()
		m.Known(e.Cluster, e.Destinations...)
	case Uploaded:
		m.lastSuccess.WithLabelValues(e.Cluster, e.Destination).Set(float64(e.Time.UnixNano()) / 1e9)
		m.duration.WithLabelValues(e.Cluster, e.Destination).Observe(e.Elapsed.Seconds())
		m.storedBytes.WithLabelValues(e.Cluster, e.Destination).Set(float64(e.StoredBytes))
		m.successes.WithLabelValues(e.Cluster, e.Destination).Inc()
	case Completed:
		m.rawBytes.WithLabelValues(e.Cluster).Set(float64(e.RawBytes))
		m.inFlight.WithLabelValues(e.Cluster).Dec()
	case Failed:
		if e.Destination != "" {
			m.failures.WithLabelValues(e.Cluster, e.Destination).Inc()
			m.reasons.WithLabelValues(e.Cluster, e.Destination, FailureReason(e.Err)).Inc()
			return
		}
		m.inFlight.WithLabelValues(e.Cluster).Dec()
	}
}

// FailureReason names the class of a backup's failure on a destination, as
// the failure-reasons metric labels it: "no-space" (a full file system,
// quota or store), "permission", "missing-bucket", "stalled" (see
// Pipeline.StallTimeout), "timeout", "canceled", "integrity" (etcd's
// stream failed its checks) or "other".
func FailureReason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, storage.ErrNoSpace):
		return "no-space"
	case errors.Is(err, storage.ErrPermission):
		return "permission"
	case errors.Is(err, storage.ErrBucketNotFound):
		return "missing-bucket"
	case errors.Is(err, ErrDestinationStalled):
		return "stalled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, ErrIntegrity):
		return "integrity"
	}
	return "other"
}
