// Package alerts holds Prometheus alerting rules for a host that embeds
// etcdbackup, in etcdbackup.rules.yaml beside this file, written against
// the library's own series: backup.Metrics, the destination registry's
// Collector, the scheduler's Collector, retention.Metrics and
// restore.DrillMetrics.
//
// The rules fire when
//
//   - a cluster's last successful backup is older than two intervals of its
//     schedule (EtcdBackupTooOld), or one destination falls that far behind
//     (EtcdBackupDestinationBehind);
//   - backups fail repeatedly (EtcdBackupRepeatedFailures,
//     EtcdBackupNeverSucceeded, EtcdBackupUploadsFailing), overlap their
//     own schedule, or old ones are not deleted (retention fails, skips
//     backups whose lock status it may not read, or keeps misdated ones);
//   - a destination is unavailable, no longer checked, its inventory stale,
//     or it holds invalid manifests;
//   - the last restore drill of a cluster failed, or none passed for a week.
//
// The schedule's interval is not a metric of its own: the rules take it
// from the gap between a job's last run and its next one, so the same rule
// serves hourly and daily schedules.
//
// The test of this package checks that every metric a rule names is one
// the library exports, by building and exercising the collectors and
// gathering them; it also checks the rules' shape, their label names and
// label values. With promtool installed, etcdbackup.rules.test.yaml
// checks what each rule fires on:
//
//	go test ./examples/alerts
//	promtool check rules examples/alerts/etcdbackup.rules.yaml
//	promtool test rules examples/alerts/etcdbackup.rules.test.yaml
package alerts
