// Package backuptest helps a host test the code that drives this library
// (a controller, an operator, a job runner) with no etcd, no network and no
// sleeps:
//
//   - Snapshotter is a backup.Snapshotter serving a fixed stream: a valid
//     etcd snapshot of chosen keys (KeysSnapshot) or of a chosen size
//     (Stream), with its sha256 trailer, that fails on demand at a byte
//     offset with an error of the test's choosing;
//   - Destinations are named in-memory buckets, made in one call, that plug
//     into schedule.PipelineRunner (Uploader, Store) and restore (Catalog);
//   - Backups lists what a destination holds for a cluster and checks each
//     backup's data object against its manifest, so that a test asserts on
//     what was committed, not on what its fakes were told.
//
// The scheduler's manual clock is in package schedule/scheduletest.
//
// The library's own tests use this package, so it stays what a host can
// rely on.
package backuptest
