// Package etcdbackup backs up and restores etcd clusters to named, pluggable
// destinations.
//
// The library is a set of small parts that a host composes into a backup
// pipeline, each in its own package:
//
//   - storage: the object-store abstraction (Put a stream, Get, Stat, List,
//     Delete) with backends for S3 (storage/s3, through minio-go) and for
//     any gocloud.dev bucket (storage/blob: GCS, Azure, local files,
//     memory), and one conformance suite (storage/storagetest) they all pass.
//   - backup: the Snapshotter that streams a snapshot out of an etcd member
//     and checks etcd's own sha256 trailer as the bytes flow, and the
//     Pipeline that compresses, encrypts and uploads it to one or more
//     destinations at once, committing each backup with a manifest.
//   - retention: policies as pure planners (keep-last, grandfather-father-
//     son, max-age) and a Pruner that cannot delete the newest backup, a
//     legacy snapshot, a locked object or another cluster's data.
//
// Destinations, restore, replicate (copies of stored backups from one
// destination to another) and scheduling build on these packages.
package etcdbackup
