package restore

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names of DrillMetrics, for alerting rules and dashboards.
const (
	MetricDrillLastSuccess   = "etcdbackup_restore_drill_last_success_timestamp_seconds"
	MetricDrillLastRun       = "etcdbackup_restore_drill_last_run_timestamp_seconds"
	MetricDrillBackupCreated = "etcdbackup_restore_drill_backup_created_timestamp_seconds"
	MetricDrillDuration      = "etcdbackup_restore_drill_duration_seconds"
	MetricDrillSuccesses     = "etcdbackup_restore_drill_success_total"
	MetricDrillFailures      = "etcdbackup_restore_drill_failures_total"
)

// DrillMetrics turns drill results into Prometheus series: whether the
// backups a host keeps still restore, which no backup metric can tell.
// Record has the shape DrillJob's record function takes. Register it on the
// host's registry. Series are labelled by cluster and destination (the
// drilled backup's source) only; a drill that found no backup to drill
// counts as a failure with an empty destination.
//
// The series:
//
//	etcdbackup_restore_drill_last_success_timestamp_seconds{cluster,destination}    gauge, end of the last passed drill
//	etcdbackup_restore_drill_last_run_timestamp_seconds{cluster,destination}        gauge, end of the last drill
//	etcdbackup_restore_drill_backup_created_timestamp_seconds{cluster,destination}  gauge, creation of the backup the last passed drill restored
//	etcdbackup_restore_drill_duration_seconds{cluster,destination}                  gauge, last drill
//	etcdbackup_restore_drill_success_total{cluster,destination}                     counter
//	etcdbackup_restore_drill_failures_total{cluster,destination}                    counter
type DrillMetrics struct {
	lastSuccess   *prometheus.GaugeVec
	lastRun       *prometheus.GaugeVec
	backupCreated *prometheus.GaugeVec
	duration      *prometheus.GaugeVec
	successes     *prometheus.CounterVec
	failures      *prometheus.CounterVec
	collectors    []prometheus.Collector
}

var _ prometheus.Collector = (*DrillMetrics)(nil)

// NewDrillMetrics returns unregistered collectors for drill results.
func NewDrillMetrics() *DrillMetrics {
	labels := []string{"cluster", "destination"}
	m := &DrillMetrics{
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricDrillLastSuccess,
			Help: "Unix time the last restore drill that passed ended.",
		}, labels),
		lastRun: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricDrillLastRun,
			Help: "Unix time the last restore drill ended, passed or failed.",
		}, labels),
		backupCreated: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricDrillBackupCreated,
			Help: "Unix time the backup the last passed drill restored was created.",
		}, labels),
		duration: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricDrillDuration,
			Help: "Time the last restore drill took.",
		}, labels),
		successes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricDrillSuccesses,
			Help: "Restore drills that proved a backup restorable.",
		}, labels),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricDrillFailures,
			Help: "Restore drills that failed, or found no backup to drill.",
		}, labels),
	}
	m.collectors = []prometheus.Collector{m.lastSuccess, m.lastRun, m.backupCreated, m.duration, m.successes, m.failures}
	return m
}

// Describe implements prometheus.Collector.
func (m *DrillMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *DrillMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors {
		c.Collect(ch)
	}
}

// Record counts one drill result; a nil result is ignored. Its signature
// is that of DrillJob's record function.
func (m *DrillMetrics) Record(_ context.Context, res *DrillResult) {
	if res == nil {
		return
	}
	labels := prometheus.Labels{"cluster": res.Cluster, "destination": res.Source}
	end := res.Started.Add(res.Duration)
	if res.Started.IsZero() {
		end = time.Now()
	}
	m.lastRun.With(labels).Set(unix(end))
	m.duration.With(labels).Set(res.Duration.Seconds())
	// Both counters exist once either outcome happened, so that increase()
	// sees a first failure as a change from zero.
	successes, failures := m.successes.With(labels), m.failures.With(labels)
	if !res.Passed() {
		failures.Inc()
		return
	}
	successes.Inc()
	m.lastSuccess.With(labels).Set(unix(end))
	m.backupCreated.With(labels).Set(unix(res.Created))
}

func unix(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
