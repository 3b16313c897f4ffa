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
// came from. The replayed store is settled first, as a snapshot of the
// source just after a compaction at that revision would be: leases with
// no key are revoked (the watch shows a revoke only as its keys' deletes,
// so a lease the source still holds without keys is dropped too), the
// store is compacted at the revision (a member restored from it refuses
// older revisions as compacted) and the database defragmented, so that
// its size is that of the live data, not of the chain's history.
//
// The synthetic full backup is encrypted as the Pipeline says; one that
// would be encrypted where the chain's full backup is not, or the other
// way round, is refused (ErrEncryptionChanged) unless the request allows
// it, so that a compactor without recipients never stores an encrypted
// chain in plaintext.
//
// The new backup counts only once it is proven: before its manifest is
// written on a destination, the stored object is read back from there and
// drilled (restore.Restorer.Drill: every digest, etcd's restore, the
// revision and the number of keys the replay produced). A failure, or a
// process killed at any step, leaves no manifest, so nothing visible: at
// most a data object without a manifest, which retention collects as an
// orphan.
//
// A compaction needs about three times the database's size on disk, in
// a work directory under Restorer.TempDir (see Compactor.Restorer); the
// directory a killed compaction leaves is removed by the next one.
//
// Compaction deletes nothing. The segments of the chain after the
// synthetic full's revision continue from it (backup.Entry.Continues):
// restore replays the newest full backup at or before a point with them,
// and retention (a point-in-time window, keep-last, GFS) treats synthetic
// full backups as full backups and keeps what every kept restore point
// depends on.
package compact
