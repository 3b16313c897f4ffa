// Package retention decides which backups of a cluster to keep and deletes
// the rest, without ever deleting the wrong thing.
//
// Policy is pure: MakePlan(cluster, entries, policy, now, opts) turns the
// entries of a cluster's folder (as backup.ListBackups returns them) into a
// Plan that keeps or deletes each one, with a reason. It reads no store and
// no clock, so it is table-tested, and property-tested over random
// histories, policies and clocks. A Policy combines keep-last-N,
// keep-within, calendar rules (the newest backup per hour, day, ISO week
// and month: grandfather-father-son) and a maximum age; the zero Policy
// keeps the last 20.
//
// Effect is separate: a Pruner (the Retainer of a destination) lists,
// plans and deletes only what the plan says. Whatever the policy:
//
//   - the newest valid backup of a cluster is never deleted;
//   - legacy, foreign and unreadable objects are never deleted;
//   - only the cluster's folder "<cluster>/" is seen, so "prod-a" never
//     touches "prod-ab";
//   - objects under an unexpired object lock, and backups pinned by a
//     restore in progress, are skipped and reported;
//   - read-only destinations are refused (storage.ErrReadOnly);
//   - a backup's manifest is deleted before its data, so a crash in between
//     leaves an orphan, never a manifest pointing at nothing;
//   - orphans older than a grace period, and stale incomplete multipart
//     uploads of this library's keys, are collected.
//
// Backups are ordered by the creation time in their manifests, never by the
// store's modification times. A dry run reports the plan and deletes
// nothing. Teardown deletes every backup of one cluster, for a host whose
// cluster is gone; it refuses an empty or pattern-like name.
package retention
