package schedule

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, for alerting rules and dashboards.
const (
	MetricJobs                = "etcdbackup_schedule_jobs"
	MetricRunsInFlight        = "etcdbackup_schedule_runs_in_flight"
	MetricRunsQueued          = "etcdbackup_schedule_runs_queued"
	MetricNextRun             = "etcdbackup_schedule_next_run_timestamp_seconds"
	MetricLastRun             = "etcdbackup_schedule_last_run_timestamp_seconds"
	MetricLastSuccess         = "etcdbackup_schedule_last_success_timestamp_seconds"
	MetricLastDuration        = "etcdbackup_schedule_last_duration_seconds"
	MetricRunning             = "etcdbackup_schedule_running"
	MetricConsecutiveFailures = "etcdbackup_schedule_consecutive_failures"
	MetricRuns                = "etcdbackup_schedule_runs_total"
	MetricSkippedRuns         = "etcdbackup_schedule_skipped_runs_total"
	MetricPruneFailures       = "etcdbackup_schedule_prune_failures_total"
	MetricHeartbeat           = "etcdbackup_schedule_heartbeat_timestamp_seconds"
)

// Collector exposes the scheduler's jobs and their status as Prometheus
// series; the host registers it on its registry. It reads the status at
// each scrape, so the series of a removed job disappear with it. Series
// are labelled by job ID (backup_job) and cluster name only, never by anything
// secret. Timestamps are absent until known.
//
//	etcdbackup_schedule_jobs                                               gauge
//	etcdbackup_schedule_runs_in_flight                                     gauge
//	etcdbackup_schedule_runs_queued                                        gauge, runs due waiting for a slot
//	etcdbackup_schedule_heartbeat_timestamp_seconds                        gauge, the scheduler's loop's last pass (at least every minute); absent when it does not run
//	etcdbackup_schedule_next_run_timestamp_seconds{backup_job,cluster}            gauge
//	etcdbackup_schedule_last_run_timestamp_seconds{backup_job,cluster}            gauge, start of the last run
//	etcdbackup_schedule_last_success_timestamp_seconds{backup_job,cluster}        gauge, end of the last successful run
//	etcdbackup_schedule_last_duration_seconds{backup_job,cluster}                 gauge
//	etcdbackup_schedule_running{backup_job,cluster}                               gauge, 0 or 1
//	etcdbackup_schedule_consecutive_failures{backup_job,cluster}                  gauge
//	etcdbackup_schedule_runs_total{backup_job,cluster,result="success|failure"}   counter
//	etcdbackup_schedule_skipped_runs_total{backup_job,cluster,reason}             counter, reason: overlap, locked, done
//	etcdbackup_schedule_prune_failures_total{backup_job,cluster}                  counter
type Collector struct {
	s *Scheduler

	jobs, inFlight, queued, heartbeat           *prometheus.Desc
	nextRun, lastRun, lastSuccess, lastDuration *prometheus.Desc
	running, consecutiveFailures, runs, skipped *prometheus.Desc
	pruneFailures                               *prometheus.Desc
}

// Collector returns a prometheus.Collector of the scheduler's series.
func (s *Scheduler) Collector() *Collector {
	labels := []string{"backup_job", "cluster"} // not "job": Prometheus sets that on every scraped series
	desc := func(name, help string, extra ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append(labels[:2:2], extra...), nil)
	}
	return &Collector{
		s:                   s,
		jobs:                prometheus.NewDesc(MetricJobs, "Jobs set in the scheduler.", nil, nil),
		inFlight:            prometheus.NewDesc(MetricRunsInFlight, "Runs in flight.", nil, nil),
		queued:              prometheus.NewDesc(MetricRunsQueued, "Runs due and waiting for a free slot.", nil, nil),
		heartbeat:           prometheus.NewDesc(MetricHeartbeat, "When the scheduler's loop last ran (at least every minute while it runs), in seconds since the epoch.", nil, nil),
		nextRun:             desc(MetricNextRun, "When the job runs next, in seconds since the epoch."),
		lastRun:             desc(MetricLastRun, "When the job's last run started, in seconds since the epoch."),
		lastSuccess:         desc(MetricLastSuccess, "When the job's last successful run ended, in seconds since the epoch."),
		lastDuration:        desc(MetricLastDuration, "How long the job's last run took."),
		running:             desc(MetricRunning, "1 while a run of the job is in flight."),
		consecutiveFailures: desc(MetricConsecutiveFailures, "Failed runs of the job since its last success."),
		runs:                desc(MetricRuns, "Runs of the job that ended, by result.", "result"),
		skipped:             desc(MetricSkippedRuns, "Runs of the job that were due but skipped, by reason.", "reason"),
		pruneFailures:       desc(MetricPruneFailures, "Retention runs of the job that failed."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.jobs, c.inFlight, c.queued, c.heartbeat, c.nextRun, c.lastRun, c.lastSuccess, c.lastDuration,
		c.running, c.consecutiveFailures, c.runs, c.skipped, c.pruneFailures,
	} {
		ch <- d
	}
}

// jobMetrics is what a scrape reads of one job, copied under the
// scheduler's lock so that sending does not hold it.
type jobMetrics struct {
	id, cluster                  string
	next, last, success          time.Time
	duration                     time.Duration
	running                      bool
	failuresInARow               int
	successes, failures, pruneKO int64
	skipped                      [3]int64 // by skipReasons
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.mu.Lock()
	inFlight, queued, heartbeat := s.inFlight, len(s.queue), s.heartbeat
	jobs := make([]jobMetrics, 0, len(s.jobs))
	for _, e := range s.jobs {
		st := e.currentStatus()
		jobs = append(jobs, jobMetrics{
			id: e.job.ID, cluster: e.job.Cluster,
			next: st.NextRun, last: st.LastRun, success: st.LastSuccess, duration: st.LastDuration,
			running: st.Running, failuresInARow: st.ConsecutiveFailures,
			successes: st.Successes, failures: st.Failures, pruneKO: st.PruneFailures,
			skipped: e.skipped,
		})
	}
	s.mu.Unlock()

	ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(len(jobs)))
	ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(inFlight))
	ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(queued))
	if !heartbeat.IsZero() {
		ch <- prometheus.MustNewConstMetric(c.heartbeat, prometheus.GaugeValue, float64(heartbeat.UnixNano())/1e9)
	}
	for _, j := range jobs {
		gauge := func(d *prometheus.Desc, v float64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{j.id, j.cluster}, extra...)...)
		}
		counter := func(d *prometheus.Desc, v int64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{j.id, j.cluster}, extra...)...)
		}
		timestamp := func(d *prometheus.Desc, t time.Time) {
			if !t.IsZero() {
				gauge(d, float64(t.UnixNano())/1e9)
			}
		}
		timestamp(c.nextRun, j.next)
		timestamp(c.lastRun, j.last)
		timestamp(c.lastSuccess, j.success)
		if !j.last.IsZero() {
			gauge(c.lastDuration, j.duration.Seconds())
		}
		running := 0.0
		if j.running {
			running = 1
		}
		gauge(c.running, running)
		gauge(c.consecutiveFailures, float64(j.failuresInARow))
		counter(c.runs, j.successes, "success")
		counter(c.runs, j.failures, "failure")
		for i, r := range skipReasons {
			counter(c.skipped, j.skipped[i], string(r))
		}
		counter(c.pruneFailures, j.pruneKO)
	}
}

var _ prometheus.Collector = (*Collector)(nil)
