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
// destination. It is written through the target's backup.Uploader (a
// *destination.Destination applies its object lock) and becomes visible
// only when its manifest is committed, last. Its creation and completion
// times are the source's, so a restore to a time gives the same answer on
// both.
//
// Every object is checked on the way: the read that completes a data
// object fails when its size or sha256 is not the manifest's, so the upload
// is abandoned and nothing of that backup is committed.
//
// A copy is idempotent and resumable. For each backup it first looks at
// the target: a committed copy of the same backup is skipped (Recheck also
// reads its data back); a data object without a manifest (a copy killed
// between the two) is read back, verified and committed; anything else
// under the backup's keys (another backup's manifest or data object) is a
// conflict, reported with ErrConflict and never overwritten.
//
// Chains stay whole. A delta segment is copied only after its chain's full
// backup and the segments before it, in revision order; a segment that
// cannot be copied (pruned on the source since it was listed) stops its
// chain there, so the target holds the chain contiguously up to a
// revision (Report.Chains) and never a chain with a hole. Selecting a
// segment selects what it restores on top of.
package replicate
