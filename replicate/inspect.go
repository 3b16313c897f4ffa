package replicate

import (
	"bytes"
	"context"
	"encoding/json"
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
	// own: the manifest or data object found carries the copy's token,
	// or the one a previous version's copy derived (ownRun): a copy of
	// this backup between the same names wrote it.
	own bool
	// dataStored: its data object, verified, without a manifest, carrying
	// the copy's token or none (a copy stopped between the two).
	dataStored bool
	// run: the token the stored data object carries when it is a copy's
	// of a version whose token hashed the source's store time (ownRun):
	// the copy commits its manifest with it.
	run string
	// pending: a data object of the backup's size without a manifest,
	// written by another writer (a backup run fanned out to the target,
	// another copy) that may still commit it: the copy leaves it alone.
	pending    bool
	pendingErr error
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
	ctx, done := r.request()
	info, err := b.Stat(ctx, dkey)
	err = done(err)
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
		return targetState{committed: true, own: ownRun(want, have.SourceStored, have.Run)}, nil
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
	tok := info.Metadata[backup.MetadataRun]
	if tok != "" && !ownRun(want, want.SourceStored, tok) {
		// The backup's bytes, another writer's: never resumed,
		// committed or removed by this copy. One without a token (an
		// older version's, a store keeping no metadata, a file write
		// killed before its attributes) is committed: no writer can
		// prove it its own, so none removes it after a refused commit.
		return targetState{pending: true, pendingErr: fmt.Errorf("%w: data object %s has no manifest yet and another writer's token", ErrPending, dkey)}, nil
	}
	st := targetState{dataStored: true, own: true}
	if tok != "" && tok != want.Run {
		st.run = tok
	}
	return st, nil
}

// targetManifest reads the target's manifest at key; nil when there is
// none. One that cannot be parsed is a conflict: it is not this backup's.
func (r *copyRun) targetManifest(key string) (*backup.Manifest, error) {
	m, err := r.readManifest(r.c.Target.Bucket, key, backup.ParseManifest)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, nil
	}
	if errors.Is(err, backup.ErrInvalidManifest) {
		return nil, fmt.Errorf("%w: %s is not a valid manifest: %w", ErrConflict, key, err)
	}
	if err != nil {
		return nil, fmt.Errorf("read target %s: %w", key, err)
	}
	return m, nil
}

// knownFields reads the source's manifest of want again, before anything
// of want is written on the target, and fails with ErrNewerManifest when
// it has fields this version does not know (the listing parsed it
// dropping them): the copy would commit a manifest without them.
func (r *copyRun) knownFields(want *backup.Manifest) error {
	key := backup.ClusterPrefix(want.Cluster) + backup.ManifestKey(want.DataKey)
	_, err := r.readManifest(r.c.Source, key, parseKnown)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return fmt.Errorf("manifest %s vanished from the source (pruned meanwhile?): %w", key, err)
	case errors.Is(err, ErrNewerManifest):
		return fmt.Errorf("source %s: %w", key, err)
	case err != nil:
		return fmt.Errorf("read source %s: %w", key, err)
	}
	return nil
}

// parseKnown parses a manifest as backup.ParseManifest does, failing with
// ErrNewerManifest when it has a field, at any depth, this version does
// not know.
func parseKnown(r io.Reader) (*backup.Manifest, error) {
	raw, err := io.ReadAll(io.LimitReader(r, backup.MaxManifestSize+1))
	if err != nil {
		return nil, err
	}
	m, err := backup.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(new(backup.Manifest)); err != nil {
		return nil, fmt.Errorf("%w (%v): a copy by this version would drop what it does not know; copy it with a version at least as new as the one that wrote it",
			ErrNewerManifest, err)
	}
	return m, nil
}

// check reads the target's object at key and checks it against want.
// The read is bounded by the copier's StallTimeout as a transfer is.
func (r *copyRun) check(key string, want backup.Digest) error {
	ctx, stalled := r.watchdog()
	defer stalled.release()
	rc, err := r.c.Target.Bucket.Get(ctx, key)
	if err == nil {
		defer rc.Close()
		_, err = io.Copy(io.Discard, newVerifyingReader(&stepReader{ReadCloser: rc, step: stalled.step}, want))
	}
	if cause := context.Cause(ctx); err != nil && r.ctx.Err() == nil && errors.Is(cause, backup.ErrDestinationStalled) {
		err = cause
	}
	if err != nil {
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
// it unlocked, and the target asks every backup to be locked. It is called
// only for objects a copy with want's token wrote. With relock false it
// locks only objects that were never locked: a lock that expired is left
// so, since the target's own retention may delete the backup then; with
// relock true (a copy resumed now) an expired lock is renewed too.
func (r *copyRun) ensureLocked(want *backup.Manifest, relock bool) error {
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
		ctx, done := r.request()
		have, err := locker.Retention(ctx, key)
		err = done(err)
		if errors.Is(err, storage.ErrNotFound) {
			continue // the manifest, not written yet: Commit locks it
		}
		if err != nil {
			return fmt.Errorf("read lock of %s: %w", key, err)
		}
		if have.Active(now) || !relock && (have.Mode != "" || !have.Until.IsZero()) {
			continue
		}
		ctx, done = r.request()
		err = done(locker.SetRetention(ctx, key, storage.Retention{Mode: lock.Mode, Until: now.Add(lock.RetainFor)}))
		if err != nil {
			return fmt.Errorf("lock %s: %w", key, err)
		}
	}
	return nil
}
