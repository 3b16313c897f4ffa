// Package backup takes verified snapshots of etcd members and streams them,
// compressed and optionally encrypted, to one or more destinations.
//
// The parts, each replaceable by a host:
//
//	Snapshotter  etcd member -> verified snapshot stream
//	Pipeline     snapshot -> compress (zstd, gzip, none) -> encrypt (age)
//	             -> fan out to every Target's Uploader -> commit manifests
//	Uploader     stores a data object, then commits its manifest
//	             (BucketUploader does it for any storage.Bucket)
//	Observer     Started, Progress, Uploaded, Completed, Failed events;
//	             Metrics turns them into Prometheus series
//	ListBackups  what a cluster's folder holds: backups, legacy snapshots,
//	             orphans, invalid manifests
//
// # Snapshotter
//
// A Snapshotter returns one Snapshot: an open stream of the bytes etcd's
// Maintenance.Snapshot sends, which is the member's bbolt database followed
// by a 32-byte sha256 of it, the same bytes `etcdctl snapshot save` writes
// to a file. Hosts that compose their own backup job depend on the one-method
// interface and may swap in a fake in tests; a fake builds its snapshots with
// NewSnapshot, so that they are verified like real ones.
//
// EtcdSnapshotter is the implementation for a real cluster. At each
// Snapshot it asks every endpoint for its status, chooses a member (by
// default the one with the highest applied raft index; PreferNonLeader
// spares the leader) and streams the snapshot through a client bound to
// that member alone. TLS, client certificates and username/password
// authentication are configured in EtcdConfig; the password appears in no
// error, log or String.
//
// # Verification while streaming
//
// etcd's client does not check the sha256 trailer; etcdutl checks it only at
// restore time. Every Snapshot passes its bytes through a TrailerReader,
// which hands each byte on at once (trailer included, so what is stored stays
// restorable by `etcdutl snapshot restore` with its hash check), hashes all
// but the last 32 bytes seen, and at the end of the stream returns an
// *IntegrityError (matching ErrSnapshotIntegrity) instead of io.EOF when the
// trailer is missing, short or wrong. A consumer that stops at its reader's
// first error, like an upload, therefore never completes with a damaged
// snapshot. A stream has a trailer if and only if its size%512 is 32, the
// rule etcdutl applies.
//
// # What a snapshot records
//
// Snapshot.Info describes the member (endpoint, member and cluster IDs,
// name, role, etcd and storage versions, applied index, database size) and,
// once a Read has returned io.EOF, the stream (raw size and sha256 of the
// whole stream). etcd's stream carries no revision: the member's revision
// is read just before the stream opens (RevisionLow) and just after it ends
// (RevisionHigh), and the revision of the snapshotted data lies in
// [RevisionLow, RevisionHigh], exactly known when both are equal.
//
// The snapshot is read from the member while the consumer reads the
// Snapshot, so etcd keeps a read transaction open for that long: a slow
// consumer holds it open longer.
//
// # The pipeline
//
// Pipeline.Run reads one snapshot and writes it to every target at once:
// the encoded bytes go through one pipe per target, and the slowest target
// sets the pace (back-pressure; nothing is buffered beyond the uploaders'
// own bounded part buffers). A failing target is dropped and the others go
// on; the Result says which targets committed. With Spool set, the encoded
// snapshot goes to a bounded temporary file first, so etcd's read
// transaction ends as soon as the snapshot is read.
//
// A backup becomes visible only when its manifest is written, after every
// byte was uploaded and the trailer matched: the manifest is the commit
// point. A damaged snapshot, a cancelled context or a failed upload leaves
// nothing visible. The manifest records the backup's ID, cluster,
// destination, creation time, the member and its versions, the revision
// bounds, the raw and stored sizes and sha256 digests, the compression, the
// fingerprints (never the keys) of the age recipients and the library's
// version.
//
// # Object layout
//
// A cluster's objects live in its folder "<cluster>/" (with the slash, so
// "prod-a" never lists "prod-ab"):
//
//	<cluster>/<timestamp>_<id>.db[.zst|.gz][.age]   data
//	<cluster>/<timestamp>_<id>.manifest.json        manifest (commit point)
//
// The timestamp (UTC, TimestampLayoutMilli: to the millisecond) comes
// first, so a folder lists in creation order; the ID follows the naming of
// scheduled backup configs: "<cluster>-<name>", with "-<timestamp>" for
// scheduled runs. Cluster, backup and destination names are DNS labels
// (ValidateName), checked before anything is read or written.
//
// # Concurrent runs
//
// Several processes may back up one cluster to one destination at once.
// Every object is created exclusively (storage.PutIfAbsent) on destinations
// that can do so atomically: of two runs that compute one ID (a config run
// twice in one millisecond) one takes it, and the other, finding it taken
// on every target, backs up again under the ID with its run token appended
// ("-<run>"), leaving the first run's backup whole. On a destination
// that cannot (storage.CanPutIfAbsent is false), IDs end in the run's
// random token ("-<run>", see UniqueBackupID), so that no two runs share a
// key. Either way a run that cannot commit removes its data object only if
// the object carries its run token (RemoveOwnData): it never deletes what
// another run wrote. A failed manifest write is read back first, since a
// lost reply may hide a write that landed (the run is then committed), and
// the data object is removed only after the store refused the write: after
// an error whose outcome is in doubt (a timeout, a cancelled context, a
// broken connection) it is kept, and retention collects it if no manifest
// ever names it.
//
// # Continuous backup
//
// A Follower watches every key of a cluster from the revision of a full
// backup on and stores the events, grouped by revision, as delta segments
// (manifest kind "delta", format 2, FirstRevision..LastRevision) next to
// the full backups, through the same compression, encryption and commit
// rule, within FlushInterval (one second) of etcd's commit. A full backup
// and its contiguous segments form a chain; restore.FindPoint and
// restore.Restorer.RestorePoint restore any revision of it. Segments list
// as KindDelta; DecodeSegment reads their encoding (SegmentVersion).
// The targets of a follower progress independently: one that fails falls
// behind and catches up from the follower's backlog, or with a full backup
// of its own, while the others go on. FollowerMetrics exports the
// follower's lag, segments, chain length and gaps, and which destinations
// are behind.
//
// # Many followers in one process
//
// The followers of a process share what does not belong to one cluster:
// the zstd encoder of segments (GOMAXPROCS encoder states of about 1.6 MiB
// for the process, not one per follower), the streaming compressors of
// full backups (Reset and reused, at most GOMAXPROCS kept idle per
// setting), the segments' buffers and storage/blob's copy buffers. A
// RunSlots shared by their pipelines (Pipeline.Slots; the scheduler has
// its own run slots) makes followers started together take their first
// full backups a few at a time (one waiting for a slot holds no watch:
// it opens its prewatch once it has one): without it, each holds a compressor of
// its own at once, and the heap the start reached sets the collector's
// goal long after. Memory then follows the work in flight, not the number
// of clusters: 100 followers over 3 etcd processes with 10 writes of 1 KiB
// a second each, full backups 4 at a time, used 1.3 MiB of RSS per follower
// once started and idle (3.4 MiB before the shared encoder), on 2 cores
// under load (etcdbackup-bench followers, README).
package backup
