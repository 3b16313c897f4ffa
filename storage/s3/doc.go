// Package s3 stores objects in Amazon S3 and S3-compatible stores (MinIO,
// Ceph RGW, ...) through minio-go, as a storage.Bucket.
//
//	b, err := s3.New(s3.Options{
//		Endpoint:     "minio.backup.svc:9000",
//		Bucket:       "etcd-backups",
//		BucketLookup: s3.LookupPath,
//		Credentials:  s3.FileCredentials("/etc/backup/credentials", "seed-eu"),
//	})
//
// Options is a plain struct: only Bucket is required, every zero value has a
// documented default, and Validate checks it without I/O. Credentials come
// from minio-go's credentials package (StaticCredentials, FileCredentials,
// EnvCredentials, IAMCredentials, ChainCredentials); nil means
// DefaultCredentials. No secret appears in an error, a log record or the
// String of Options or Bucket.
//
// # Streaming uploads with bounded memory
//
// Put takes a reader of unknown length, as an etcd snapshot stream is. It
// does not use minio-go's PutObject with size -1, which buffers parts of
// 528 MiB; it runs its own multipart upload on minio.Core instead: each Put
// holds at most PartsInFlight x PartSize bytes of part buffers (its budget,
// 4 x 8 MiB by default), reading into one while the others upload, so
// memory stays within the budget whatever the object's size. A stream that
// ends within the first buffer (PartSize bytes) becomes a single PutObject.
// Every stream of up to MaxParts x PartSize bytes fits (78.1 GiB by
// default); a stream that runs out of part numbers fails with ErrTooLarge.
//
// # Part size, parts in flight and a distant store
//
// A part's request takes at least a round trip to the store, whatever its
// size, so an upload moves at most the bytes in flight per round trip:
// the budget, less the buffer being filled, divided by the time a part
// takes. 16 MiB of buffers (the CLI's default --memory) is about 160 MiB/s
// at 100 ms in theory, less with TLS, slow start and the store's own time
// per request; twice the budget is about twice that. The budget is the
// lever: more memory, more throughput from a distant store, and nothing
// gained from one next door.
//
// By default every part is PartSize bytes, PartsInFlight of them in
// flight. With Options.AdaptiveParts, Put sizes its parts within the
// budget from what it measures instead. It times the reader filling each
// part and the part's request; their ratio is how many parts must be in
// flight for the reader never to wait. Where the store is slow to answer,
// the following parts shrink (to MinPartSize at least) so that more of
// them fit in the budget beside the one filling; where it keeps up, they
// grow (to half the budget at most) and fewer requests carry the same
// bytes. Whatever it measures, a part is never smaller than what the part
// numbers left need for a stream of MaxParts x PartSize bytes in parts of
// at most the budget, so the largest object does not shrink; a stream far
// larger than the promise uploads its last parts one at a time, as large
// as the budget.
//
// Adaptive parts are off by default because they were not measured to
// gain anything where it matters most. TestAdaptivePartsUnderLatency sends
// 40 MiB from a reader of 32 MiB/s through a 16 MiB budget (8 MiB x 2) to
// MinIO on loopback bandwidth, every part request held by a proxy: at
// 100 ms, 1.43-1.64 s in fixed parts against 1.39-1.52 s in adaptive ones
// (the reader's pace: the same six parts); at 800 ms, 3.05-3.82 s against
// 3.08-3.80 s (three 5 MiB parts in flight instead of two of 8 MiB).
// Where the round trip dominates, an upload moves about the budget per
// round trip however it is split; smaller parts gain only the shorter fill
// of the buffer not yet in flight. They may help where a request's time
// grows with its size (a slow link, not a distant one), or where a reader
// much slower than the store lets larger parts save requests. And some
// S3-compatible stores refuse parts of several sizes ("All non-trailing
// parts must have the same length": Cloudflare R2, Garage), which Put
// cannot detect before the upload's completion fails: set AdaptiveParts
// only for a store known to accept them (Amazon S3, MinIO, Ceph RGW).
//
// Every part carries its CRC32C, which the store verifies. When the reader
// fails, a request fails or the context is cancelled, Put aborts the
// multipart upload on a context detached from the cancelled one (bounded by
// AbortTimeout) and waits for its part requests, so no goroutine is left
// behind, and the returned error matches the reader's error or
// context.Canceled with errors.Is. An incomplete upload is left only when
// the abort itself fails (the store unreachable, or the role without
// s3:AbortMultipartUpload): the error then says so, and it stays until
// storage.UploadCleaner (which retention runs) or the bucket's lifecycle
// rule removes it.
//
// # Errors
//
// S3 error codes become the storage sentinels, wrapped in a
// *storage.Error whose chain still holds the minio.ErrorResponse:
// NoSuchKey -> storage.ErrNotFound, NoSuchBucket -> storage.ErrBucketNotFound,
// AccessDenied, InvalidAccessKeyId, SignatureDoesNotMatch and expired tokens
// -> storage.ErrPermission, PreconditionFailed -> storage.ErrExist, an
// object-lock refusal -> storage.ErrLocked, a lock request on a bucket
// without object lock -> storage.ErrUnsupported.
//
// Amazon S3 answers 409 ConditionalRequestConflict, not 412, to the loser
// of two conditional writes of one key in flight at once (or to one raced
// by a delete). An exclusive PutObject so answered is retried, as AWS
// documents, up to four times: the retry meets the winner's object
// (storage.ErrExist) or writes its own. A CompleteMultipartUpload so
// answered cannot be retried as AWS documents (a new upload of every part
// needs the stream again): it is storage.ErrExist when an object is then
// visible at the key, and otherwise an error after which nothing is
// written.
//
// # Optional abilities
//
// Bucket implements storage.ExclusivePutter (If-None-Match: *),
// storage.Locker (object retention), storage.LegalHolder (legal hold) and
// storage.UploadCleaner (listing and aborting incomplete multipart
// uploads). Client returns the minio-go client for anything else.
//
// On a versioned or object-lock bucket a plain DELETE only adds a delete
// marker: the key reads as missing, the locked version stays. Delete
// therefore removes every version on a bucket with object lock, which a
// lock still in force refuses with storage.ErrLocked; it learns whether the
// bucket has object lock from the bucket's configuration, or from the
// object's retention or legal hold when the configuration is refused, and
// fails with ErrLockUnknown when it may read none of them. Set
// Options.DeleteAllVersions to remove every version on any bucket.
package s3
