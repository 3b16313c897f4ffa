// Package blob makes any gocloud.dev/blob bucket a storage.Bucket: Google
// Cloud Storage (gs://), Azure Blob Storage (azblob://), S3 (s3://), a local
// directory (file://) or memory (mem://).
//
// New wraps a *blob.Bucket the caller opened and keeps; Open opens a URL
// through a *blob.URLMux the caller owns, and Close closes what Open
// opened. This package registers nothing anywhere: package drivers builds a
// mux with the usual drivers, and importing it is what links them in.
//
// What the adapter adds to gocloud:
//
//   - Keys are checked with storage.ValidateKey (prefixes with
//     storage.ValidatePrefix) before any I/O, and errors are translated by
//     gcerrors.Code into *storage.Error values that match the storage
//     sentinels (NotFound is storage.ErrNotFound, PermissionDenied is
//     storage.ErrPermission, ...).
//   - Put is all or nothing. It copies the body into a gocloud Writer and,
//     when the body or the write fails or ctx is cancelled, cancels the
//     Writer's context before closing it: that is what makes every driver
//     discard the write (gocloud's own Bucket.Upload closes without
//     cancelling and commits whatever it read before a failing reader's
//     error). The content type is always explicit, so gocloud never sniffs.
//     On s3blob, where the AWS transfer manager tries to abort its
//     multipart upload on the already cancelled context and so leaves it
//     behind, Put aborts that upload itself on a detached context. On
//     azureblob, whose Writer panics in Close after a failed upload, Put
//     hands the body to the driver's own upload instead, which commits the
//     block list only after the body ended well.
//   - List yields keys in ascending byte order, as S3 does. fileblob walks
//     directories instead ("a/b" comes before "a-b"), and its paging then
//     loses and repeats keys, so for file buckets List reads the listing
//     whole and sorts it. It never shows fileblob's ".attrs" sidecars or
//     temporary files, and refuses such names as keys.
//   - PutIfAbsent uses gocloud's IfNotExist where the driver checks it
//     atomically (s3blob, gcsblob, azureblob, memblob). fileblob's own
//     IfNotExist checks before its rename, so concurrent writers could all
//     win: on a file bucket that Open opened, PutIfAbsent instead writes a
//     hidden temporary file and hard-links it to its name, which fails
//     when the name exists, so exactly one writer wins. A fileblob bucket
//     given to New (directory unknown) answers storage.ErrUnsupported, and
//     storage.PutIfAbsent falls back. Amazon S3's 409
//     ConditionalRequestConflict is storage.ErrExist when an object is then
//     visible at the key. For an S3-compatible store that ignores
//     If-None-Match, set Options.NoExclusivePut.
//   - On a file bucket that Open opened, a put is durable when it returns:
//     fileblob syncs nothing, so the adapter writes the object under a
//     hidden temporary name, fsyncs its data and its ".attrs" file, links
//     or renames both into place and fsyncs each directory from the key's
//     up to the bucket's. On Linux, a directory whose name an earlier put
//     of the same Bucket fsynced is not fsynced again while it and every
//     directory above it up to the bucket's are the same ones (device,
//     inode and the inode's generation, FS_IOC_GETVERSION): a put into an
//     existing directory fsyncs that directory alone. Where the generation
//     cannot be read (tmpfs, overlayfs, NFS, a bucket directory that is a
//     symbolic link, other systems), every put fsyncs every directory. A
//     directory moved away and back keeps its identity: do not move a
//     bucket's directories while a process has it open. A file system that
//     cannot fsync a directory fails the put with an error that says so.
//     On Linux 5.8 and later, on ext2/3/4, XFS, Btrfs, F2FS and tmpfs,
//     the puts of one Bucket share syncs instead: each put waits for one
//     syncfs(2) of the file system that began after it wrote its
//     temporary object, and for another after it named it, together with
//     every other put waiting at that moment (about a hundred syncs a
//     second for a thousand followers' segments, instead of six fsyncs
//     each); on ext2/3/4 without a journal each syncfs is followed by an
//     fsync of the bucket's directory, which flushes the device's cache
//     again. Such a kernel's syncfs reports a write-back error of any
//     file of the file system, once: a put that saw a shared sync fail
//     while it was being written then fsyncs its own files and
//     directories one by one, and fails only on an error of its own. A
//     large put has the kernel write its data back 8 MiB at a time as it
//     goes. A shared sync also waits for whatever else is being written
//     to that file system: Options.SyncEachFile keeps the fsyncs of each
//     file. Bucket.PutThenStage (storage.PairStager: a backup's data
//     object, then its manifest) names the first object before the one
//     shared sync that makes it and the second's temporary object durable,
//     so that a segment's data object and manifest take two syncs where a
//     Stage of both and a Publish of each take three.
//   - A full file system or quota (ENOSPC, EDQUOT) and an S3 store out of
//     space (507, XMinioStorageFull, an InternalError whose cause is "no
//     space left on device") give storage.ErrNoSpace.
//   - On s3blob buckets the Bucket is also a storage.UploadCleaner.
//
// As hands out the driver's native types (**s3.Client for s3blob, ...)
// through gocloud's As.
//
// A file bucket stores key "a/b" as the file a/b, so "a/b" and "a/b/c" cannot
// both exist there: the second Put fails with storage.ErrInvalidKey. s3blob
// escapes some keys on S3 (a segment ending in "..", text like "__0x41__"),
// which S3 then lists by their escaped form: List reports the disorder
// unless Options.SortList is set.
package blob
