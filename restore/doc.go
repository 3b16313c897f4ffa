// Package restore finds etcd backups on any number of sources, downloads and
// verifies them, and restores etcd member data directories from them with
// etcd's own restore code.
//
// # Find
//
// A Source is a name and a backup.Catalog (List and Get; every
// storage.Bucket has them), usually a destination's bucket. List classifies
// a cluster's folder on every source with backup.ListBackups; Find picks one
// restorable entry: the newest, one named by backup ID, data or manifest
// file name or key, or the newest created before a given time. A backup
// stored on several sources is taken from the first of them. Restorable are
// backups with a manifest and legacy objects: snapshots written by
// `etcdctl snapshot save` or older jobs, raw or compressed, found in the
// cluster's folder without a manifest.
//
// # Fetch
//
// Restorer.Fetch streams the object through age decryption and
// decompression into "<path>.part", checking as the bytes flow the stored
// object's size and sha256 and the decoded snapshot's size and sha256
// against the manifest, and etcd's own sha256 trailer (backup.VerifyTrailer).
// Only when every check passed is the file synced and renamed to path; on
// any failure nothing is left at path or at "<path>.part". A legacy object's
// encoding is read from its first bytes (age, gzip, zstd magic numbers), and
// its integrity rests on the trailer alone.
//
// Errors say what went wrong: ErrIntegrity for damaged or truncated bytes
// (the trailer's errors match backup.ErrSnapshotIntegrity too), ErrDecrypt
// when no identity given opens the backup (known from the manifest's
// recipient fingerprints before anything is downloaded), the store's own
// error when the download breaks off, ErrTargetExists when the target is
// taken. A backup's age header that does not open with an identity the
// manifest lists as a recipient is damaged, not locked: ErrIntegrity.
//
// Memory does not grow with the snapshot: a goroutine reads ahead a few
// megabytes so that the download overlaps decoding, and everything else
// streams through fixed buffers.
//
// # Restore
//
// Restorer.RestoreFile and Restorer.Restore create a member's data
// directory (etcdutl snapshot restore: name, initial cluster, peer URLs,
// cluster token, optional revision bump with mark-compacted).
// RestoreCluster and RestoreClusterFile create those of every member of a
// cluster from one download. Each restore runs in a temporary directory next
// to the data directory and is renamed into place at the end, so a failure
// leaves no half data directory; a data directory that is not empty is
// refused. Restorer.Drill proves a backup restorable without touching a
// live cluster (fetch, etcdutl status, restore into a temporary directory)
// and returns a DrillResult a host can record; DrillJob wraps it for a
// scheduler. A Restorer whose Pins holds the retention.PinSet the host's
// pruners share keeps the backup it reads from being pruned meanwhile,
// from the moment its fetch starts (not from Find), and only against the
// pruners of its own process: a prune in another process, or one before
// the pin, can delete the backup a restore chose, which then fails with
// storage.ErrNotFound and restores nothing. A pin taken while a prune
// deletes the backup waits for the deletes; cancelling the operation's
// context ends that wait (Pins that implement ContextPinner, as PinSet
// does).
//
// # Point-in-time restore
//
// FindPoint finds, for a revision or a time, the newest full backup at or
// before it and the delta segments (written by backup.Follower) that lead
// from it to the point, without a gap. Restorer.RestorePoint (and
// RestoreClusterPoint for every member of a cluster) restores the full
// backup as Restore does, reads the restored database's exact revision, and
// applies the later events offline through etcd's storage packages
// (backend, mvcc, lease), one write transaction per source revision, so
// that the member starts at exactly the point with every key's create and
// mod revision, version and lease as the source had them. Each segment's
// digests are checked before its events are applied, and every put's
// create revision and version are compared with what mvcc computes. A
// point in a gap is a *GapError (matching ErrNoChain) naming the missing
// revisions; Point.NearestEarlier restores the nearest earlier point
// instead, and the plan says so. A Member.RevisionBump raises the
// replayed store's revision and marks it compacted, as etcdutl's
// --bump-revision --mark-compacted.
//
// Observers receive Started, Progress (bytes and rate), Fetched, Restored
// and Failed events.
package restore
