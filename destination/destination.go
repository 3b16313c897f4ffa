package destination

import (
	"context"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"sync"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/cleanup"
	"github.com/etcdbackup/etcdbackup/storage"
)

// Destination is one named destination of a Registry. It is the
// destination's storage.Bucket (confined to its prefix), its
// backup.Uploader and its backup.Catalog, so a host passes it as is to a
// backup pipeline (Target), to restore and to retention.
//
// A *Destination stays the same value across updates of its spec: each
// operation uses the client current when it starts, and keeps it to its
// end. After the destination is removed from its registry, new operations
// fail with ErrNotFound; those under way finish.
//
// It is safe for concurrent use.
type Destination struct {
	name string
	reg  *Registry
	log  *slog.Logger

	wakeCheck chan struct{} // nudges the availability checker after an update
	wakeSync  chan struct{} // nudges the inventory syncer after an update

	mu      sync.RWMutex
	spec    Spec
	loc     Location
	h       *handle // nil while the store could not be opened
	openErr error
	gen     uint64 // counts spec changes; results of older generations are dropped
	removed bool
	pins    map[string]pin // "<cluster>/<data key>" -> the Upload awaiting its Commit

	statusMu sync.Mutex
	status   Status

	inv inventoryState
}

// pin keeps, between Upload and Commit, the client the data object went
// to, so that the manifest goes next to it even if the destination moved
// meanwhile.
type pin struct {
	h    *handle
	spec Spec
}

var (
	_ storage.Bucket           = (*Destination)(nil)
	_ storage.ExclusivePutter  = (*Destination)(nil)
	_ storage.ExclusiveChecker = (*Destination)(nil)
	_ backup.ExclusiveUploader = (*Destination)(nil)
	_ storage.Locker           = (*Destination)(nil)
	_ storage.LegalHolder      = (*Destination)(nil)
	_ storage.UploadCleaner    = (*Destination)(nil)
	_ backup.Uploader          = (*Destination)(nil)
	_ backup.Storer            = (*Destination)(nil)
	_ backup.Catalog           = (*Destination)(nil)
)

// Name returns the destination's name.
func (d *Destination) Name() string { return d.name }

// String describes the destination: its name and location, no credential.
func (d *Destination) String() string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return fmt.Sprintf("destination %s (%s)", quote(d.name), d.loc)
}

// Spec returns the destination's current spec.
func (d *Destination) Spec() Spec {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.spec
}

// Location returns where the destination's objects are.
func (d *Destination) Location() Location {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.loc
}

// ReadOnly reports whether the destination refuses writes and deletes.
// Retention checks it before planning deletions.
func (d *Destination) ReadOnly() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.spec.ReadOnly
}

// ObjectLock returns the lock the destination applies to the backups it
// writes.
func (d *Destination) ObjectLock() ObjectLock {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.spec.ObjectLock
}

// Status returns the destination's availability as last checked.
func (d *Destination) Status() Status {
	d.statusMu.Lock()
	defer d.statusMu.Unlock()
	return d.status
}

// Target returns the destination as a target of a backup.Pipeline.
func (d *Destination) Target() backup.Target {
	return backup.Target{Destination: d.name, Uploader: d}
}

// current returns the current handle with a reference taken.
func (d *Destination) current() (*handle, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.currentLocked()
}

func (d *Destination) currentLocked() (*handle, error) {
	switch {
	case d.removed:
		return nil, fmt.Errorf("%w: %s was removed", ErrNotFound, quote(d.name))
	case d.h == nil:
		return nil, fmt.Errorf("destination %s: %w: %w", quote(d.name), ErrUnavailable, d.openErr)
	}
	d.h.acquire()
	return d.h, nil
}

// writable returns the current handle for a write, or ErrReadOnly.
func (d *Destination) writable(op, key string) (*handle, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.spec.ReadOnly {
		return nil, d.readOnlyError(op, key)
	}
	return d.currentLocked()
}

func (d *Destination) readOnlyError(op, key string) error {
	return &storage.Error{Op: op, Key: key, Err: fmt.Errorf("%s: %w", quote(d.name), ErrReadOnly)}
}

// Get implements storage.Bucket and backup.Catalog.
func (d *Destination) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	h, err := d.current()
	if err != nil {
		return nil, err
	}
	rc, err := h.bucket.Get(ctx, key)
	if err != nil {
		h.release()
		return nil, err
	}
	return &releasingReader{ReadCloser: rc, h: h}, nil
}

// Stat implements storage.Bucket.
func (d *Destination) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	h, err := d.current()
	if err != nil {
		return storage.ObjectInfo{}, err
	}
	defer h.release()
	return h.bucket.Stat(ctx, key)
}

// List implements storage.Bucket and backup.Catalog.
func (d *Destination) List(ctx context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error] {
	return listOn(d.current, func(h *handle) iter.Seq2[storage.ObjectInfo, error] {
		return h.bucket.List(ctx, prefix)
	})
}

// Put implements storage.Bucket. A read-only destination refuses it with
// ErrReadOnly.
func (d *Destination) Put(ctx context.Context, key string, r io.Reader, opts *storage.PutOptions) error {
	h, err := d.writable("put", key)
	if err != nil {
		return err
	}
	defer h.release()
	return h.bucket.Put(ctx, key, r, opts)
}

// PutIfAbsent implements storage.ExclusivePutter. A read-only destination
// refuses it with ErrReadOnly.
func (d *Destination) PutIfAbsent(ctx context.Context, key string, r io.Reader, opts *storage.PutOptions) error {
	h, err := d.writable("put", key)
	if err != nil {
		return err
	}
	defer h.release()
	return h.bucket.PutIfAbsent(ctx, key, r, opts)
}

// CanPutIfAbsent implements storage.ExclusiveChecker with the answer of
// the bucket the destination uses now.
func (d *Destination) CanPutIfAbsent() bool {
	h, err := d.current()
	if err != nil {
		return false
	}
	defer h.release()
	return storage.CanPutIfAbsent(h.bucket)
}

// UploadsExclusively implements backup.ExclusiveUploader: whether the
// destination's bucket creates objects atomically if absent.
func (d *Destination) UploadsExclusively() bool { return d.CanPutIfAbsent() }

// Delete implements storage.Bucket. A read-only destination refuses it
// with ErrReadOnly.
func (d *Destination) Delete(ctx context.Context, key string) error {
	h, err := d.writable("delete", key)
	if err != nil {
		return err
	}
	defer h.release()
	if err := h.bucket.Delete(ctx, key); err != nil {
		return err
	}
	if gone := d.inv.deleted(key); len(gone) > 0 {
		d.reg.observe(Event{Kind: InventoryChanged, Destination: d.name, Time: d.reg.now(), Removed: gone})
	}
	return nil
}

// SetRetention implements storage.Locker. A read-only destination refuses
// it with ErrReadOnly.
func (d *Destination) SetRetention(ctx context.Context, key string, r storage.Retention) error {
	h, err := d.writable("set retention", key)
	if err != nil {
		return err
	}
	defer h.release()
	return h.bucket.SetRetention(ctx, key, r)
}

// Retention implements storage.Locker.
func (d *Destination) Retention(ctx context.Context, key string) (storage.Retention, error) {
	h, err := d.current()
	if err != nil {
		return storage.Retention{}, err
	}
	defer h.release()
	return h.bucket.Retention(ctx, key)
}

// LegalHold implements storage.LegalHolder. The error matches
// storage.ErrUnsupported when the destination's store has no legal holds.
func (d *Destination) LegalHold(ctx context.Context, key string) (bool, error) {
	h, err := d.current()
	if err != nil {
		return false, err
	}
	defer h.release()
	return h.bucket.LegalHold(ctx, key)
}

// IncompleteUploads implements storage.UploadCleaner.
func (d *Destination) IncompleteUploads(ctx context.Context, prefix string) iter.Seq2[storage.Upload, error] {
	return listOn(d.current, func(h *handle) iter.Seq2[storage.Upload, error] {
		return h.bucket.IncompleteUploads(ctx, prefix)
	})
}

// AbortUpload implements storage.UploadCleaner. A read-only destination
// refuses it with ErrReadOnly.
func (d *Destination) AbortUpload(ctx context.Context, u storage.Upload) error {
	h, err := d.writable("abort upload", u.Key)
	if err != nil {
		return err
	}
	defer h.release()
	return h.bucket.AbortUpload(ctx, u)
}

func pinKey(m *backup.Manifest) string { return backup.ClusterPrefix(m.Cluster) + m.DataKey }

// Upload implements backup.Uploader through backup.BucketUploader. A
// read-only destination refuses it with ErrReadOnly. The upload runs to
// its end on the client current when it started, even if the destination
// is updated meanwhile (new credentials, another bucket), and its Commit
// uses that client too. With ObjectLock set, the data object is locked
// before Upload returns; if it cannot be, it is removed and Upload fails.
func (d *Destination) Upload(ctx context.Context, m *backup.Manifest, r io.Reader) error {
	d.mu.RLock()
	spec := d.spec
	var h *handle
	err := d.readOnlyError("upload", pinKey(m))
	if !spec.ReadOnly {
		h, err = d.currentLocked()
	}
	d.mu.RUnlock()
	if err != nil {
		return err
	}
	up := backup.BucketUploader{Bucket: h.bucket}
	if err := up.Upload(ctx, m, r); err != nil {
		h.release()
		return err
	}
	if spec.ObjectLock.Enabled() {
		if err := d.lock(ctx, h, spec, pinKey(m)); err != nil {
			cctx, cancel := cleanup.Context(ctx, time.Minute)
			if derr := backup.RemoveOwnData(cctx, h.bucket, m); derr != nil {
				err = fmt.Errorf("%w (and the unlocked data object could not be removed: %v)", err, derr)
			}
			cancel()
			h.release()
			return err
		}
	}
	d.mu.Lock()
	if old, ok := d.pins[pinKey(m)]; ok {
		old.h.release() // an Upload whose Commit never came
	}
	d.pins[pinKey(m)] = pin{h: h, spec: spec}
	d.mu.Unlock()
	return nil
}

// Commit implements backup.Uploader: it writes the manifest with the client
// Upload used, so that a backup runs from start to end on one client and
// its manifest lands next to its data, whatever updates happened in
// between. A Commit without an Upload through this destination uses the
// current client. With ObjectLock set, the manifest is locked too; a
// failure to lock it is logged, since the backup is then committed.
func (d *Destination) Commit(ctx context.Context, m *backup.Manifest) error {
	d.mu.Lock()
	p, pinned := d.pins[pinKey(m)]
	delete(d.pins, pinKey(m))
	var (
		h   *handle
		err error
	)
	switch {
	case pinned:
		h = p.h
	case d.spec.ReadOnly:
		err = d.readOnlyError("commit", pinKey(m))
	default:
		h, err = d.currentLocked()
		p.spec = d.spec
	}
	d.mu.Unlock()
	if err != nil {
		return err
	}
	defer h.release()
	up := backup.BucketUploader{Bucket: h.bucket}
	if err := up.Commit(ctx, m); err != nil {
		return err
	}
	if e := (Entry{Destination: d.name, Entry: backup.EntryOf(m)}); d.inv.committed(e) {
		d.reg.observe(Event{Kind: InventoryChanged, Destination: d.name, Time: d.reg.now(), Added: []Entry{e}})
	}
	if p.spec.ObjectLock.Enabled() {
		key := backup.ClusterPrefix(m.Cluster) + backup.ManifestKey(m.DataKey)
		if err := d.lock(ctx, h, p.spec, key); err != nil {
			d.log.Warn("backup committed but its manifest could not be locked", "key", key, "error", err)
		}
	}
	return nil
}

// Store implements backup.Storer through backup.BucketUploader's, on the
// client current when it starts: a destination whose bucket stages
// objects (file://) stores a segment's data object and manifest in two
// waits for the disk (see backup.BucketUploader.Store). A read-only destination, one with
// ObjectLock (whose data object is locked between the two writes) and
// one whose bucket cannot stage fail with storage.ErrUnsupported, and
// the caller uploads and commits.
func (d *Destination) Store(ctx context.Context, m *backup.Manifest, r io.Reader) (bool, error) {
	d.mu.RLock()
	spec := d.spec
	var h *handle
	err := fmt.Errorf("store in one call: %w", storage.ErrUnsupported)
	if !spec.ReadOnly && !spec.ObjectLock.Enabled() {
		h, err = d.currentLocked()
	}
	d.mu.RUnlock()
	if err != nil {
		return false, err
	}
	defer h.release()
	up := backup.BucketUploader{Bucket: h.bucket}
	if committing, err := up.Store(ctx, m, r); err != nil {
		return committing, err
	}
	if e := (Entry{Destination: d.name, Entry: backup.EntryOf(m)}); d.inv.committed(e) {
		d.reg.observe(Event{Kind: InventoryChanged, Destination: d.name, Time: d.reg.now(), Added: []Entry{e}})
	}
	return true, nil
}

// lock applies the spec's object lock to key.
func (d *Destination) lock(ctx context.Context, h *handle, spec Spec, key string) error {
	until := d.reg.now().Add(spec.ObjectLock.RetainFor)
	if err := h.bucket.SetRetention(ctx, key, storage.Retention{Mode: spec.ObjectLock.Mode, Until: until}); err != nil {
		return fmt.Errorf("lock %s: %w", key, err)
	}
	return nil
}

// replace installs a new spec and client (h nil with openErr when opening
// failed). It retires the old client, keeps the inventory unless the
// location changed, and nudges the destination's workers.
func (d *Destination) replace(spec Spec, loc Location, h *handle, openErr error) {
	d.mu.Lock()
	old := d.h
	moved := d.loc != loc
	d.spec, d.loc, d.h, d.openErr = spec, loc, h, openErr
	d.gen++
	d.mu.Unlock()
	if old != nil && old != h {
		old.retire()
	}
	if moved {
		d.inv.reset()
		d.statusMu.Lock()
		d.status = Status{State: StateUnknown}
		d.statusMu.Unlock()
	}
	nudge(d.wakeCheck)
	nudge(d.wakeSync)
}

// respec gives d a spec that needs no new client (see Spec.needsReopen),
// keeping the client and open error d has at this moment: a check may have
// opened a client since the caller looked.
func (d *Destination) respec(spec Spec, loc Location) {
	d.mu.Lock()
	d.spec, d.loc = spec, loc
	d.gen++
	d.mu.Unlock()
	nudge(d.wakeCheck)
	nudge(d.wakeSync)
}

// remove detaches the destination from its registry: new operations fail,
// those under way finish (an uploaded backup still commits, on its pinned
// client), the inventory is forgotten. Nothing is deleted from the store.
func (d *Destination) remove() {
	d.mu.Lock()
	old := d.h
	d.removed, d.h = true, nil
	d.gen++
	d.mu.Unlock()
	if old != nil {
		old.retire()
	}
	d.inv.reset()
}

// snapshot returns the current generation, spec and location and, unless
// the destination was removed, its handle with a reference taken (nil when
// it is not open).
func (d *Destination) snapshot() (gen uint64, spec Spec, loc Location, h *handle, removed bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.h != nil && !d.removed {
		d.h.acquire()
		h = d.h
	}
	return d.gen, d.spec, d.loc, h, d.removed
}

// installIfCurrent installs h, opened for generation gen, unless the spec
// changed meanwhile, and takes a reference on it for the caller; it
// reports whether it did.
func (d *Destination) installIfCurrent(gen uint64, h *handle) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gen != gen || d.removed || d.h != nil {
		return false
	}
	d.h, d.openErr = h, nil
	h.acquire()
	return true
}

func nudge(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
