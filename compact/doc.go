// Package compact turns a chain of continuous backup into a synthetic full
// backup, offline: restore time then stays flat however long the chain
// grows, and a full snapshot from etcd is needed only to start a chain.
//
// A Compactor takes the full backup and the delta segments after it up to
// a revision (restore.FindPoint), replays them as point-in-time restore
// does (restore.Restorer.RestorePointDatabase: the same replay, no etcd
// involved), and stores the result through backup's pipeline as a new full
// backup of the same cluster at exactly that revision: the same manifest,
// digests, compression and encryption as any full backup, with
// backup.Manifest.Synthetic naming the base, the chain and the revision it
// came from.
//
// The new backup counts only once it is proven: before its manifest is
// written on a destination, the stored object is read back from there and
// drilled (restore.Restorer.Drill: every digest, etcd's restore, the
// revision and the number of keys the replay produced). A failure, or a
// process killed at any step, leaves no manifest, so nothing visible: at
// most a data object without a manifest, which retention collects as an
// orphan.
//
// Compaction deletes nothing. The segments of the chain after the
// synthetic full's revision continue from it (backup.Entry.Continues):
// restore replays the newest full backup at or before a point with them,
// and retention (a point-in-time window, keep-last, GFS) treats synthetic
// full backups as full backups and keeps what every kept restore point
// depends on.
package compact
