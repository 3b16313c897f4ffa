// Package storage is the object-store abstraction every other package of
// etcdbackup builds on.
//
// A Bucket is five operations: Put a stream of unknown length, Get a stream,
// Stat, List by prefix and Delete. Its contract is what backups need from an
// object store and nothing more:
//
//   - Put is all or nothing. A reader that fails or a context that is
//     cancelled leaves no object behind (and, on S3, no unfinished multipart
//     upload); an object already under the key stays as it was.
//   - List yields every key under a prefix in ascending byte order, fetching
//     pages as the caller iterates; a prefix is a plain string prefix, so
//     callers that mean a folder end it with a slash ("prod-a/" never
//     reaches "prod-ab/").
//   - Errors wrap the sentinels of this package (ErrNotFound, ErrPermission,
//     ...), so errors.Is works whatever the backend, and never contain
//     credentials.
//   - Keys are checked by ValidateKey before any I/O: no "..", no empty
//     segments, no control characters.
//
// Abilities only some stores have are optional interfaces: ExclusivePutter
// (create only if absent), Locker and LegalHolder (S3 object lock) and UploadCleaner
// (unfinished multipart uploads). Helper functions such as PutIfAbsent use
// them when present and fall back where a fallback is sound.
//
// The backends live in subpackages: storage/s3 (S3 and S3-compatible stores
// through minio-go, with bounded memory) and storage/blob (any gocloud.dev
// bucket: GCS, Azure, local files, memory). Package storagetest is the
// conformance suite all of them, and every wrapper such as Prefixed, pass.
package storage
