package destination

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/etcdbackup/etcdbackup/backup"
)

// Metric names, for alerting rules and dashboards.
const (
	MetricAvailable           = "etcdbackup_destination_available"
	MetricConsecutiveFailures = "etcdbackup_destination_consecutive_check_failures"
	MetricLastCheck           = "etcdbackup_destination_last_check_timestamp_seconds"
	MetricInventoryEntries    = "etcdbackup_destination_inventory_entries"
	MetricLastSync            = "etcdbackup_destination_inventory_last_sync_timestamp_seconds"
	MetricBackups             = "etcdbackup_destination_backups"
	MetricNewestBackup        = "etcdbackup_destination_newest_backup_timestamp_seconds"
)

var (
	descAvailable = prometheus.NewDesc(MetricAvailable,
		"Whether the destination's last availability check succeeded (1) or failed (0).",
		[]string{"destination"}, nil)
	descFailures = prometheus.NewDesc(MetricConsecutiveFailures,
		"Availability checks of the destination that failed since the last success.",
		[]string{"destination"}, nil)
	descLastCheck = prometheus.NewDesc(MetricLastCheck,
		"When the destination's last availability check ended.",
		[]string{"destination"}, nil)
	descEntries = prometheus.NewDesc(MetricInventoryEntries,
		"Objects found on the destination by its last inventory sync, by kind.",
		[]string{"destination", "kind"}, nil)
	descLastSync = prometheus.NewDesc(MetricLastSync,
		"When the destination's last successful inventory sync ended.",
		[]string{"destination"}, nil)
	descBackups = prometheus.NewDesc(MetricBackups,
		"Snapshot backups of the cluster on the destination, as its inventory holds them: from the first sync after a start, and at once after each commit or delete through the registry.",
		[]string{"destination", "cluster"}, nil)
	descNewest = prometheus.NewDesc(MetricNewestBackup,
		"When the cluster's newest snapshot backup on the destination was created, in seconds since the epoch, as its inventory holds it.",
		[]string{"destination", "cluster"}, nil)
)

// Collector returns a Prometheus collector of the registry's destinations,
// for the host to register on its own registry. It reads the destinations'
// state at each scrape, so a removed destination's series go with it. A
// destination not checked yet has no availability series.
//
//	etcdbackup_destination_available{destination}                              gauge 1/0
//	etcdbackup_destination_consecutive_check_failures{destination}             gauge
//	etcdbackup_destination_last_check_timestamp_seconds{destination}           gauge
//	etcdbackup_destination_inventory_entries{destination,kind}                 gauge
//	etcdbackup_destination_inventory_last_sync_timestamp_seconds{destination}  gauge
//	etcdbackup_destination_backups{destination,cluster}                        gauge
//	etcdbackup_destination_newest_backup_timestamp_seconds{destination,cluster} gauge
//
// The last two come from the inventory, so they survive a restart of the
// host (its first sync fills them, before any new backup) and follow the
// library's own commits and deletes at once.
func (r *Registry) Collector() prometheus.Collector { return collector{r} }

type collector struct{ r *Registry }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descAvailable, descFailures, descLastCheck, descEntries, descLastSync, descBackups, descNewest} {
		ch <- d
	}
}

var kinds = []backup.Kind{backup.KindBackup, backup.KindDelta, backup.KindKeysJSON, backup.KindKeys, backup.KindLegacy, backup.KindOrphan, backup.KindInvalid, backup.KindForeign}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, d := range c.r.List() {
		st := d.Status()
		if st.State != StateUnknown {
			v := 0.0
			if st.Available() {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descAvailable, prometheus.GaugeValue, v, d.name)
			ch <- prometheus.MustNewConstMetric(descFailures, prometheus.GaugeValue, float64(st.ConsecutiveFailures), d.name)
			ch <- prometheus.MustNewConstMetric(descLastCheck, prometheus.GaugeValue, float64(st.LastCheck.UnixNano())/1e9, d.name)
		}
		inv := d.Inventory()
		if inv.Synced.IsZero() {
			continue
		}
		counts := map[backup.Kind]int{}
		for _, e := range inv.Entries {
			counts[e.Kind]++
		}
		for _, k := range kinds {
			ch <- prometheus.MustNewConstMetric(descEntries, prometheus.GaugeValue, float64(counts[k]), d.name, string(k))
		}
		ch <- prometheus.MustNewConstMetric(descLastSync, prometheus.GaugeValue, float64(inv.Synced.UnixNano())/1e9, d.name)
		collectClusters(ch, d.name, inv)
	}
}

// collectClusters sends the count and the newest creation time of each
// cluster's snapshot backups in inv.
func collectClusters(ch chan<- prometheus.Metric, dest string, inv Inventory) {
	type stats struct {
		n      int
		newest float64
	}
	var order []string
	by := map[string]*stats{}
	for _, e := range inv.Entries {
		if e.Kind != backup.KindBackup {
			continue
		}
		st := by[e.Cluster]
		if st == nil {
			st = &stats{}
			by[e.Cluster] = st
			order = append(order, e.Cluster)
		}
		st.n++
		st.newest = max(st.newest, float64(e.Created.UnixNano())/1e9)
	}
	for _, c := range order {
		ch <- prometheus.MustNewConstMetric(descBackups, prometheus.GaugeValue, float64(by[c].n), dest, c)
		ch <- prometheus.MustNewConstMetric(descNewest, prometheus.GaugeValue, by[c].newest, dest, c)
	}
}
