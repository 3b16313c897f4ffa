// Package replicate copies stored backups of a cluster from one
// destination to another: a second region, a bucket being retired, a
// locked copy in another account.
//
//	source: list (backup.ListBackups) -> plan (selection, chains whole)
//	  -> per backup: look at the target -> stream the data object,
//	     checking its sha256 against the manifest -> commit the manifest
//
// A Copier copies backups as they are stored. Their bytes are compressed
// and maybe age-encrypted already and are never decoded, so a copy needs
// no decryption key. Memory is bounded by the target's upload buffers,
// never by a backup's size.
//
// A backup on the target looks exactly as if it had been written there:
// the same data key and manifest, recording the target's name as its
// destination (and the copy's run token). The manifest is written as this
// version knows it, so a backup whose manifest has fields this version
// does not know (a newer version's writer added them) is not copied: it
// fails with ErrNewerManifest before anything of it is written on the
// target. Copy with a version at least as new as the versions that wrote
// the source's backups. A copy is written through the target's
// backup.Uploader (a *destination.Destination applies its object lock)
// and becomes visible only when its manifest is committed, last. Its creation and completion
// times are the source's, so a restore to a time gives the same answer on
// both.
//
// Every object is checked on the way: the read that completes a data
// object fails when its size or sha256 is not the manifest's, so the upload
// is abandoned and nothing of that backup is committed.
//
// A copy is idempotent and resumable. It writes with a run token of its
// own (backup.Manifest.Run), derived from the manifest it commits and never
// the source's: a backup run fanned out to the source and the target
// writes the same data object on both with the run's token, and a copy
// never takes that object for its own. It lists the target once (its
// manifests read concurrently, as backup.ListBackups does), and for each
// backup looks at what the target holds: a committed copy of the same
// backup is skipped without another request (Recheck reads each data
// object back instead); a data object without a manifest carrying the
// copy's token (a copy killed between the two) or none (no writer can then
// prove it its own, so none removes it) is read back, verified and
// committed; one carrying another token is another writer's in-flight
// backup, left alone and reported Pending (the next copy finds it
// committed); anything else under the backup's keys (another backup's
// manifest or data object) is a conflict, reported with ErrConflict and
// never overwritten. A copy removes only data objects carrying its token,
// and locks (a target with an object lock) only objects a copy with its
// token wrote and never an expired lock again, so the target's retention
// keeps its say over what it holds.
//
// Chains stay whole. A delta segment is copied only after its chain's full
// backup and the segments before it, in revision order, right after the
// full backup (a target's prune keeps a chain it wrote lately whole); a segment that
// cannot be copied (pruned on the source since it was listed), or a hole
// in the source's chain (ErrChainHole), stops its chain there, so the target holds the chain contiguously up to a
// revision (Report.Chains) and never a chain with a hole. Selecting a
// segment selects what it restores on top of. A chain whose first segments
// are gone (a point-in-time window no longer needs them) is copied on top
// of the synthetic full backup that continues it, whole from there: the
// source's, copied first (such chains wait until every full backup is),
// and never a full backup the source does not hold (another writer's on
// the target, never checked against the source and deleted whenever its
// writer's retention says so). A chain is reported whole only if the
// target still holds its full backups once its segments are copied
// (ErrChainBaseGone).
//
// IsCopy tells a copy from its manifest, which is what a replication job's
// retention prunes. Copies committed by versions before the copy token
// (they kept the source's run token) cannot be told from a backup run
// fanned out to the target: they are not recognised as copies, on purpose.
// A copy skips them (the target holds the same backup) and a replication
// job's retention keeps them, as it keeps every other writer's backups;
// remove them with a prune or delete of their backup name on the target
// once they are no longer wanted. Treating them as copies would let a
// replication job delete the backups a fanned-out run wrote there.
package replicate
