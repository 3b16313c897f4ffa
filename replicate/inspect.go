package replicate

import (
	"errors"
	"fmt"
	"io"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/storage"
)

// targetState is what the target holds of a backup.
type targetState struct {
	// committed: its manifest, the same backup's, and its data object.
	committed bool
	// dataStored: its data object, verified, without a manifest (a copy
	// stopped between the two).
	dataStored bool
}

// inspect looks at what the target holds under want's keys. A manifest or
// data object that is not want's fails with ErrConflict: it is never
// overwritten. A committed backup whose data object is missing or of
// another size fails too: the copy does not repair a committed backup.
func (r *copyRun) inspect(want *backup.Manifest) (targetState, error) {
	b := r.c.Target.Bucket
	prefix := backup.ClusterPrefix(want.Cluster)
	mkey, dkey := prefix+backup.ManifestKey(want.DataKey), prefix+want.DataKey
	have, err := r.targetManifest(mkey)
	if err != nil {
		return targetState{}, err
	}
	info, err := b.Stat(r.ctx, dkey)
	dataFound := err == nil
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return targetState{}, fmt.Errorf("stat target %s: %w", dkey, err)
	}
	if have != nil {
		switch {
		case !sameBackup(have, want):
			return targetState{}, fmt.Errorf("%w: manifest %s describes another backup", ErrConflict, mkey)
		case !dataFound:
			return targetState{}, fmt.Errorf("the target's manifest %s names data object %s, which is missing", mkey, dkey)
		case info.Size != want.Stored.Size:
			return targetState{}, fmt.Errorf("the target's data object %s is %d bytes, its manifest says %d", dkey, info.Size, want.Stored.Size)
		case r.c.Recheck:
			if err := r.check(dkey, want.Stored); err != nil {
				return targetState{}, fmt.Errorf("the target's committed copy is damaged: %w", err)
			}
		}
		return targetState{committed: true}, nil
	}
	if !dataFound {
		return targetState{}, nil
	}
	if info.Size != want.Stored.Size {
		return targetState{}, fmt.Errorf("%w: data object %s is %d bytes, the backup's is %d", ErrConflict, dkey, info.Size, want.Stored.Size)
	}
	if err := r.check(dkey, want.Stored); err != nil {
		if errors.Is(err, ErrDigestMismatch) {
			return targetState{}, fmt.Errorf("%w: data object %s: %w", ErrConflict, dkey, err)
		}
		return targetState{}, err
	}
	return targetState{dataStored: true}, nil
}

// targetManifest reads the target's manifest at key; nil when there is
// none. One that cannot be parsed is a conflict: it is not this backup's.
func (r *copyRun) targetManifest(key string) (*backup.Manifest, error) {
	rc, err := r.c.Target.Bucket.Get(r.ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read target %s: %w", key, err)
	}
	defer rc.Close()
	m, err := backup.ParseManifest(rc)
	if errors.Is(err, backup.ErrInvalidManifest) {
		return nil, fmt.Errorf("%w: %s is not a valid manifest: %w", ErrConflict, key, err)
	}
	if err != nil {
		return nil, fmt.Errorf("read target %s: %w", key, err)
	}
	return m, nil
}

// check reads the target's object at key and checks it against want.
func (r *copyRun) check(key string, want backup.Digest) error {
	rc, err := r.c.Target.Bucket.Get(r.ctx, key)
	if err != nil {
		return fmt.Errorf("read target %s: %w", key, err)
	}
	defer rc.Close()
	if _, err := io.Copy(io.Discard, newVerifyingReader(rc, want)); err != nil {
		return fmt.Errorf("check target %s: %w", key, err)
	}
	return nil
}

// lockPolicy is implemented by targets that lock what they store
// (destination.Destination).
type lockPolicy interface {
	ObjectLock() destination.ObjectLock
}

// ensureLocked applies the target's object lock to want's objects that
// lack it: a copy stopped between storing an object and locking it leaves
// it unlocked, and the target asks every backup to be locked.
func (r *copyRun) ensureLocked(want *backup.Manifest) error {
	lp, ok := r.c.Target.Bucket.(lockPolicy)
	if !ok || !lp.ObjectLock().Enabled() {
		return nil
	}
	lock := lp.ObjectLock()
	locker, ok := r.c.Target.Bucket.(storage.Locker)
	if !ok {
		return fmt.Errorf("target asks for an object lock and cannot set one: %w", storage.ErrUnsupported)
	}
	prefix := backup.ClusterPrefix(want.Cluster)
	now := r.c.now()
	for _, key := range []string{prefix + want.DataKey, prefix + backup.ManifestKey(want.DataKey)} {
		have, err := locker.Retention(r.ctx, key)
		if errors.Is(err, storage.ErrNotFound) {
			continue // the manifest, not written yet: Commit locks it
		}
		if err != nil {
			return fmt.Errorf("read lock of %s: %w", key, err)
		}
		if have.Active(now) {
			continue
		}
		if err := locker.SetRetention(r.ctx, key, storage.Retention{Mode: lock.Mode, Until: now.Add(lock.RetainFor)}); err != nil {
			return fmt.Errorf("lock %s: %w", key, err)
		}
	}
	return nil
}
