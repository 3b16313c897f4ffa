package retention

import "github.com/prometheus/client_golang/prometheus"

// Metrics turns prune reports into Prometheus series, so that retention
// that stops doing its work is seen: a Pruner with Metrics set records
// every report. Register it on the host's registry. Series are labelled by
// cluster and destination name, and the misdated gauge by the backup config
// and kind a prune counts too (each config prunes with its own scope).
//
// The series:
//
//	etcdbackup_retention_prune_skipped_total{cluster,destination,reason}  counter
//	etcdbackup_retention_misdated_backups{cluster,destination,backup_name,kind}  gauge, last prune
//
// reason is one of the Skip values of Item: "locked" and "pinned" are
// retention keeping its promises; "lock-unreadable" (the store's role may
// not read object lock status) and "delete-failed" mean old backups stay
// and the bucket grows. Misdated backups are kept and counted by no keep
// rule (see PlanOptions.ClockSkew): a store whose clock runs behind the
// writers' makes every new backup one, and retention then keeps all.
type Metrics struct {
	skipped  *prometheus.CounterVec
	misdated *prometheus.GaugeVec
}

var _ prometheus.Collector = (*Metrics)(nil)

// Metric names, for alerting rules and dashboards.
const (
	MetricPruneSkipped = "etcdbackup_retention_prune_skipped_total"
	MetricMisdated     = "etcdbackup_retention_misdated_backups"
)

// NewMetrics returns unregistered collectors for prune reports.
func NewMetrics() *Metrics {
	return &Metrics{
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricPruneSkipped,
			Help: "Entries retention was to delete and left, by reason (locked, pinned, lock-unreadable, delete-failed).",
		}, []string{"cluster", "destination", "reason"}),
		misdated: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricMisdated,
			Help: "Backups the last prune of a backup config kept because the store contradicts their manifests' dates beyond the clock skew (after now, after the store wrote them, or long before).",
		}, []string{"cluster", "destination", "backup_name", "kind"}),
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.skipped.Describe(ch)
	m.misdated.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.skipped.Collect(ch)
	m.misdated.Collect(ch)
}

// Record counts the skipped items of a report and sets the number of
// misdated backups of its plan, for the plan's backup config (backup_name,
// empty for a prune of every config) and kind. Every reason's counter exists from the
// first report on, so that an alert on its increase sees the first skip.
func (m *Metrics) Record(r *Report) {
	if r == nil {
		return
	}
	for _, reason := range []string{SkipLocked, SkipPinned, SkipLockUnreadable, SkipDeleteFailed} {
		m.skipped.WithLabelValues(r.Cluster, r.Destination, reason).Add(0)
	}
	for _, it := range r.Items {
		if it.Outcome == Skipped && it.Skip != "" {
			m.skipped.WithLabelValues(r.Cluster, r.Destination, it.Skip).Inc()
		}
	}
	if r.Plan != nil {
		o := r.Plan.Options
		m.misdated.WithLabelValues(r.Cluster, r.Destination, o.Name, string(o.Kind)).Set(float64(len(r.Plan.Misdated())))
	}
}
