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
//   - the newest valid backup of a cluster (of a config, with a name) is
//     never deleted, by creation time or by revision;
//   - legacy, foreign and unreadable objects are never deleted, nor the
//     data object a manifest names, readable or not;
//   - only the cluster's folder "<cluster>/" is seen, so "prod-a" never
//     touches "prod-ab";
//   - entries with an object under an unexpired object lock or a legal
//     hold (every object of the entry is checked before any is deleted),
//     and entries of every kind pinned by a restore or fetch in progress
//     of this process (a PinSet shared with the Restorer: checked again
//     right before the first delete, with new pins held off until the
//     deletes end), are skipped and reported. Pins live in memory: a
//     restore in another process (the CLI beside a scheduler), or one
//     between its Find and the pin its fetch takes, is not protected; it
//     may find the backup it chose deleted, and then fails with
//     storage.ErrNotFound rather than restoring anything else;
//     entries that could not be checked (an object lock status the role
//     may not read) or deleted make Prune fail with ErrSkipped, and
//     Metrics counts them;
//   - read-only destinations are refused (storage.ErrReadOnly);
//   - a backup's manifest is deleted before its data, so a crash in between
//     leaves an orphan, never a manifest pointing at nothing;
//   - orphans older than a grace period, and stale incomplete multipart
//     uploads of this library's keys (on file:// the hidden temporary files
//     of a killed put), are collected; their age is taken by
//     the pruner's clock and, where an object stored after them confirms
//     it, by the store's (the newest modification time listed), so a
//     pruner whose clock runs fast does not take an upload in flight for a
//     stale one once anything newer is stored in the cluster's folder. In
//     a folder where nothing was stored since the upload started, the
//     pruner's clock alone ages it: a clock more than UploadGrace fast can
//     abort that upload, and the backup it belongs to then fails.
//
// Backups are ordered by the creation time in their manifests, never by the
// store's modification times; but a backup dated more than the clock skew
// after now, or after the store wrote its manifest, is kept and counted by
// no rule (Plan.Misdated), so that a writer whose clock runs fast never
// pushes correctly dated backups out; a copy (PlanOptions.Copies) is
// checked against the time its source's store wrote it, which the copy
// records (backup.Manifest.SourceStored), instead of this store's. A
// ChainPolicy keeps each config's point-in-time window restorable, from a
// base whose date the store's time and the revisions confirm (or, with
// FromOldestKept, the chains that reach past the oldest full backup kept,
// or that the store wrote any of within ChainPolicy.Grace),
// and never leaves a hole in a chain whose later segments, out of its
// scope, stay. A dry run reports the plan and deletes
// nothing. Teardown deletes every backup of one cluster, for a host whose
// cluster is gone; it refuses an empty or pattern-like name.
package retention
