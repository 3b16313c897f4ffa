package restore

import (
	"errors"

	"github.com/etcdbackup/etcdbackup/backup"
)

// ErrIntegrity matches every error about stored bytes that were damaged: an
// encrypted chunk that fails authentication, a compressed stream that is
// corrupt or cut short, a stored or raw size or sha256 that differs from the
// manifest, and a snapshot whose etcd sha256 trailer is missing or wrong
// (those errors match backup.ErrSnapshotIntegrity too). It is the backup
// package's sentinel, so errors.Is answers the same with either name.
var ErrIntegrity = backup.ErrIntegrity

// ErrDecrypt matches errors about an encrypted backup that none of the
// identities given can decrypt, or that is encrypted while no identity was
// given. It is the backup package's sentinel.
var ErrDecrypt = backup.ErrDecrypt

// ErrTargetExists is returned, before anything is written, when the target
// of a fetch is an existing file (or its ".part" file exists), or when the
// data directory of a restore exists and is not empty. Restore never
// overwrites anything.
var ErrTargetExists = errors.New("restore target exists")

// ErrNoBackup is returned by Find when no restorable backup matches the
// query on any source that could be listed.
var ErrNoBackup = errors.New("no matching backup")

// ErrNotRestorable is returned by Find when the backup asked for by ID
// exists but cannot be restored: an orphan data object without a manifest,
// an invalid manifest or a missing data object. The error says what is wrong.
var ErrNotRestorable = errors.New("backup is not restorable")
