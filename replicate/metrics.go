package replicate

import (
	"sync"
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
//	etcdbackup_replication_failures_total{cluster,source,target}       counter: backups that failed, and copies that failed before any backup (RecordFailure)
//	etcdbackup_replication_invalid_source_manifests{cluster,source,target,name} gauge: manifests the last copy of name (Report.Name; "" for every name's) selected but could not read (ErrInvalidSource)
//
// A manifest the copy cannot read (Item.InvalidSource) counts in the last
// series only: it is not a backup the target lags behind on, and it stays
// until someone repairs or removes it on the source, or a version that
// reads it copies it. Its series are per backup name a job copies: one of
// a name no job copies any more (a job renamed or removed) keeps its last
// value until the process restarts; alert on the series of the names
// jobs copy, or take the max by target.
//
// A copy that fails before it can tell what the target lacks (a source
// that cannot be listed, a target that cannot be opened) is recorded with
// RecordFailure: the failures counter moves and the lag goes on growing
// from what the last report said the target lacked (or from the start of
// the last copy that left it in step); backups_behind keeps its last value.
type Metrics struct {
	lag, behind, inStep  *prometheus.GaugeVec
	invalid              *prometheus.GaugeVec
	bytes, backups, fail *prometheus.CounterVec

	mu sync.Mutex
	// since is, per cluster, source and target, the time from which the
	// target may lack backups: the creation of the oldest it lacked at the
	// last report, or the start of the last copy that left it in step.
	since map[[3]string]time.Time
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
	// MetricInvalidSource counts the source's manifests the last copy
	// selected but could not read (ErrInvalidSource).
	MetricInvalidSource = "etcdbackup_replication_invalid_source_manifests"
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
		invalid: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricInvalidSource,
			Help: "Manifests on the source the last copy of a backup name (all: empty) selected but this version cannot read: not copied."},
			append(labels, "name")),
	}
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.lag, m.behind, m.inStep, m.bytes, m.backups, m.fail, m.invalid}
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
	behind, copied, failed, invalid := 0, 0, 0, 0
	var oldest time.Time
	for _, it := range rep.Items {
		if it.InvalidSource() {
			invalid++
			continue
		}
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
	since := oldest
	if behind > 0 {
		lag = max(now.Sub(oldest).Seconds(), 0)
	} else {
		since = now.Add(-rep.Elapsed)
		m.inStep.With(labels).Set(float64(since.UnixNano()) / 1e9)
	}
	m.mu.Lock()
	if m.since == nil {
		m.since = map[[3]string]time.Time{}
	}
	m.since[[3]string{rep.Cluster, rep.Source, rep.Target}] = since
	m.mu.Unlock()
	m.lag.With(labels).Set(lag)
	m.behind.With(labels).Set(float64(behind))
	m.bytes.With(labels).Add(float64(rep.CopiedBytes))
	m.backups.With(labels).Add(float64(copied))
	m.fail.With(labels).Add(float64(failed))
	m.invalid.WithLabelValues(rep.Cluster, rep.Source, rep.Target, rep.Name).Set(float64(invalid))
}

// RecordFailure records a copy of cluster from source to target that
// failed, at now, before it made a report (Copier.Copy returned none): the
// failures counter moves, and the lag is the time since the target may
// lack backups by the last report (it grows while copies fail); with no
// report recorded yet the lag is not set. The last report's time is kept
// in memory only: after a restart, the lag of a copy that keeps failing
// (a source dead since before the restart) is not set until a copy makes
// a report, and the failures counter alone tells.
func (m *Metrics) RecordFailure(cluster, source, target string, now time.Time) {
	if m == nil {
		return
	}
	labels := prometheus.Labels{"cluster": cluster, "source": source, "target": target}
	m.fail.With(labels).Inc()
	m.mu.Lock()
	since, ok := m.since[[3]string{cluster, source, target}]
	m.mu.Unlock()
	if ok {
		m.lag.With(labels).Set(max(now.Sub(since).Seconds(), 0))
	}
}
