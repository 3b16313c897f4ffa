package replicate

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics turns copy reports into Prometheus series, labelled by cluster,
// source and target. Register it on the host's registry and call Record
// after each copy (schedule.PipelineRunner does for replication jobs).
//
//	etcdbackup_replication_lag_seconds{cluster,source,target}          gauge: age of the oldest selected backup the target lacks; 0 when in step
//	etcdbackup_replication_backups_behind{cluster,source,target}       gauge: selected backups the target lacks
//	etcdbackup_replication_in_step_timestamp_seconds{cluster,source,target} gauge: start of the last copy that left the target in step
//	etcdbackup_replication_copied_bytes_total{cluster,source,target}   counter
//	etcdbackup_replication_copied_backups_total{cluster,source,target} counter
//	etcdbackup_replication_failures_total{cluster,source,target}       counter: backups that failed
type Metrics struct {
	lag, behind, inStep  *prometheus.GaugeVec
	bytes, backups, fail *prometheus.CounterVec
}

var _ prometheus.Collector = (*Metrics)(nil)

// Replication metric names, for alerting rules and dashboards.
const (
	MetricLag     = "etcdbackup_replication_lag_seconds"
	MetricBehind  = "etcdbackup_replication_backups_behind"
	MetricInStep  = "etcdbackup_replication_in_step_timestamp_seconds"
	MetricBytes   = "etcdbackup_replication_copied_bytes_total"
	MetricBackups = "etcdbackup_replication_copied_backups_total"
	MetricFailed  = "etcdbackup_replication_failures_total"
)

// NewMetrics returns unregistered collectors for copy reports.
func NewMetrics() *Metrics {
	labels := []string{"cluster", "source", "target"}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	return &Metrics{
		lag:     gauge(MetricLag, "Age of the oldest selected backup the target did not hold after the last copy; 0 when in step."),
		behind:  gauge(MetricBehind, "Selected backups the target did not hold after the last copy."),
		inStep:  gauge(MetricInStep, "Unix time the last copy that left the target in step started."),
		bytes:   counter(MetricBytes, "Stored bytes copied."),
		backups: counter(MetricBackups, "Backups copied or resumed."),
		fail:    counter(MetricFailed, "Backups whose copy failed."),
	}
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.lag, m.behind, m.inStep, m.bytes, m.backups, m.fail}
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

// Record records a copy's report, which ended at now.
func (m *Metrics) Record(rep *Report, now time.Time) {
	if m == nil || rep == nil {
		return
	}
	labels := prometheus.Labels{"cluster": rep.Cluster, "source": rep.Source, "target": rep.Target}
	behind, copied, failed := 0, 0, 0
	var oldest time.Time
	for _, it := range rep.Items {
		switch it.Outcome {
		case Copied, Resumed:
			copied++
		case Failed:
			failed++
		}
		if present(it.Outcome) {
			continue
		}
		behind++
		if oldest.IsZero() || it.Created.Before(oldest) {
			oldest = it.Created
		}
	}
	lag := 0.0
	if behind > 0 {
		lag = max(now.Sub(oldest).Seconds(), 0)
	} else {
		m.inStep.With(labels).Set(float64(now.Add(-rep.Elapsed).UnixNano()) / 1e9)
	}
	m.lag.With(labels).Set(lag)
	m.behind.With(labels).Set(float64(behind))
	m.bytes.With(labels).Add(float64(rep.CopiedBytes))
	m.backups.With(labels).Add(float64(copied))
	m.fail.With(labels).Add(float64(failed))
}
