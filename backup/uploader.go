package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/etcdbackup/etcdbackup/internal/cleanup"
	"github.com/etcdbackup/etcdbackup/internal/faultpoint"
	"github.com/etcdbackup/etcdbackup/storage"
)

// Uploader stores backups on one destination. The pipeline calls Upload
// with the encoded stream and, once every byte is in and verified, Commit
// with the finished manifest. A host replaces the store step by
// implementing it (BucketUploader is the implementation for any
// storage.Bucket).
type Uploader interface {
	// Upload stores r as the data object that m describes. m holds what is
	// known before the stream starts (ID, cluster, data key, compression,
	// encryption). Upload must be all or nothing: when r returns an error
	// or ctx ends, nothing may be left visible.
	Upload(ctx context.Context, m *Manifest, r io.Reader) error
	// Commit makes the uploaded backup visible by writing its manifest.
	Commit(ctx context.Context, m *Manifest) error
}

// ErrBackupExists is returned when a backup's data object or manifest
// already exists: two runs of one ID (a config run twice in the same
// millisecond). A run that meets it on any target commits the ID on none
// of them (Pipeline.Run). A one-shot name used twice at different moments
// is not caught here: its data key carries the creation time, and the
// scheduler's record of its one-shot jobs keeps it unique.
var ErrBackupExists = errors.New("backup already exists")

// ExclusiveUploader is implemented by Uploaders that create a backup's
// objects exclusively and atomically, so that of two runs writing the same
// key exactly one succeeds. The pipeline gives runs on any other Uploader
// IDs of their own (UniqueBackupID), so that they never share a key.
type ExclusiveUploader interface {
	// UploadsExclusively reports whether Upload and Commit create their
	// objects atomically if absent.
	UploadsExclusively() bool
}

// uploadsExclusively reports whether u is an ExclusiveUploader that says so.
func uploadsExclusively(u Uploader) bool {
	eu, ok := u.(ExclusiveUploader)
	return ok && eu.UploadsExclusively()
}

// Discarder is implemented by Uploaders that can remove a data object
// Upload stored whose manifest will never be written (the pipeline gave
// the backup up, see Pipeline.Run). Discard must remove only the object
// this run wrote; an Uploader without it leaves the object as an orphan.
type Discarder interface {
	Discard(ctx context.Context, m *Manifest) error
}

// BucketUploader stores backups in a storage.Bucket, which is usually a
// destination's bucket confined to its prefix. A cluster's objects live in
// the folder "<cluster>/": the data object under Manifest.DataKey and the
// manifest next to it (see ManifestKey).
type BucketUploader struct {
	Bucket storage.Bucket
	// CleanupTimeout bounds the removal of a data object whose manifest
	// could not be written. Zero means one minute.
	CleanupTimeout time.Duration
}

var (
	_ Uploader          = (*BucketUploader)(nil)
	_ ExclusiveUploader = (*BucketUploader)(nil)
	_ Discarder         = (*BucketUploader)(nil)
)

// Discard implements Discarder: RemoveOwnData, on a context of its own
// bounded by CleanupTimeout, so that a run's cancellation does not keep
// it from cleaning up.
func (u *BucketUploader) Discard(ctx context.Context, m *Manifest) error {
	ctx, cancel := cleanup.Context(ctx, u.cleanupTimeout())
	defer cancel()
	return RemoveOwnData(ctx, u.Bucket, m)
}

func (u *BucketUploader) cleanupTimeout() time.Duration {
	if u.CleanupTimeout == 0 {
		return time.Minute
	}
	return u.CleanupTimeout
}

// UploadsExclusively implements ExclusiveUploader: whether the bucket
// creates objects atomically if absent (storage.CanPutIfAbsent).
func (u *BucketUploader) UploadsExclusively() bool { return storage.CanPutIfAbsent(u.Bucket) }

// ClusterPrefix returns the folder of a cluster's objects, with its trailing
// slash, so that "prod-a/" never lists "prod-ab/...".
func ClusterPrefix(cluster string) string { return cluster + "/" }

// Upload implements Uploader. It never overwrites an existing object.
func (u *BucketUploader) Upload(ctx context.Context, m *Manifest, r io.Reader) error {
	if err := validateDataKey(m.DataKey); err != nil {
		return fmt.Errorf("%w: data key: %v", ErrInvalidManifest, err)
	}
	key := ClusterPrefix(m.Cluster) + m.DataKey
	err := storage.PutIfAbsent(ctx, u.Bucket, key, faultpoint.Reader("upload-streaming", r), dataPutOptions(m))
	if err == nil {
		faultpoint.Hit("data-stored")
	}
	return dataExists(key, err)
}

// dataPutOptions are the options of m's data object's put: its metadata
// names the backup and the run.
func dataPutOptions(m *Manifest) *storage.PutOptions {
	md := map[string]string{"etcdbackup-id": m.ID}
	if m.Run != "" {
		md[MetadataRun] = m.Run
	}
	return &storage.PutOptions{Metadata: md}
}

// dataExists returns err, the error of the put of the data object key,
// as ErrBackupExists when the key was taken.
func dataExists(key string, err error) error {
	if errors.Is(err, storage.ErrExist) {
		return fmt.Errorf("%w: %s: %w", ErrBackupExists, key, err)
	}
	return err
}

// Commit implements Uploader. It never overwrites an existing manifest.
//
// A failed manifest write may still have landed: a reply lost after the
// store wrote the manifest (a retry then meets this run's own manifest and
// is refused with ErrExist), or a context that ended after the request was
// sent. So after any error Commit reads the manifest back, on a context of
// its own bounded by CleanupTimeout: if it holds exactly the bytes this
// run wrote, the backup is committed and Commit returns nil.
//
// Otherwise Commit removes the data object Upload wrote only when the store
// refused the write (storage.ErrExist: another run's manifest, read back;
// ErrPermission, ErrReadOnly, ErrLocked, ErrBucketNotFound, ErrInvalidKey),
// and only when the object carries this run's token (Manifest.Run) and no
// manifest of this run's token names it (two copies of one backup share a
// token, and the first to commit owns the data object). After
// an error that leaves the outcome in doubt (a timeout, a cancelled
// context, a broken connection, or ErrExist with a read-back that finds no
// manifest, from a replica or cache behind the write) it keeps the data
// object, since a manifest written late would otherwise name deleted data:
// if no manifest ever lands, the object is an orphan that retention
// collects.
func (u *BucketUploader) Commit(ctx context.Context, m *Manifest) error {
	body, err := m.Marshal()
	if err != nil {
		return err
	}
	key := ClusterPrefix(m.Cluster) + ManifestKey(m.DataKey)
	err = storage.PutIfAbsent(ctx, u.Bucket, key, bytes.NewReader(body), manifestPutOptions())
	if err == nil {
		faultpoint.Hit("manifest-stored")
		return nil
	}
	return u.commitFailed(ctx, m, key, body, err)
}

// manifestPutOptions are the options of a manifest's put.
func manifestPutOptions() *storage.PutOptions {
	return &storage.PutOptions{ContentType: "application/json"}
}

// commitFailed is Commit after the write of m's manifest, body at key,
// failed with err: it reads the manifest back, and removes the data
// object only when the store refused the write.
func (u *BucketUploader) commitFailed(ctx context.Context, m *Manifest, key string, body []byte, err error) error {
	cleanupCtx, cancel := cleanup.Context(ctx, u.cleanupTimeout())
	defer cancel()
	got, found, rerr := readBack(cleanupCtx, u.Bucket, key)
	if rerr == nil && found && bytes.Equal(got, body) {
		return nil
	}
	// ErrExist says something is at the key: a read-back that finds
	// nothing right after (a replica or cache behind the write) leaves in
	// doubt whether it is this run's manifest.
	doubt := rerr != nil || !refused(err) || errors.Is(err, storage.ErrExist) && !found
	if errors.Is(err, storage.ErrExist) {
		err = fmt.Errorf("%w: %s: %w", ErrBackupExists, key, err)
	}
	if doubt {
		return fmt.Errorf("write manifest: %w (the data object was kept, since the manifest may still land; retention collects it if not)", err)
	}
	if namesOwnData(got, m) {
		// Another manifest of this run's token names the data object: a
		// copy of the same backup (package replicate) committed it first,
		// recording another source's time. The data object is its.
		return fmt.Errorf("write manifest: %w (a manifest of the same run token names the data object: kept)", err)
	}
	if derr := RemoveOwnData(cleanupCtx, u.Bucket, m); derr != nil {
		return fmt.Errorf("write manifest: %w (and the data object was left for retention to collect: %w)", err, derr)
	}
	return fmt.Errorf("write manifest: %w", err)
}

// maxManifestReadBack bounds the read-back of a manifest after a failed
// write: a manifest is a few KiB.
const maxManifestReadBack = 1 << 20

// holds reports whether key holds exactly body, and whether it holds
// anything. A missing key is (false, false, nil); an error reading it is
// returned, since the key's content is then unknown.
func holds(ctx context.Context, b Catalog, key string, body []byte) (held, found bool, err error) {
	got, found, err := readBack(ctx, b, key)
	return err == nil && found && bytes.Equal(got, body), found, err
}

// readBack returns the first maxManifestReadBack bytes at key, and
// whether the key holds anything. A missing key is (nil, false, nil).
func readBack(ctx context.Context, b Catalog, key string) ([]byte, bool, error) {
	rc, err := b.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer rc.Close()
	got, err := io.ReadAll(io.LimitReader(rc, maxManifestReadBack))
	return got, true, err
}

// namesOwnData reports whether got, the manifest at m's manifest key, is
// one of m's run token naming m's data object: that data object is then
// committed under it, whatever else the two manifests differ in.
func namesOwnData(got []byte, m *Manifest) bool {
	if m.Run == "" || len(got) == 0 {
		return false
	}
	have, err := ParseManifest(bytes.NewReader(got))
	return err == nil && have.Run == m.Run && have.DataKey == m.DataKey && have.Cluster == m.Cluster
}

// refused reports whether err is a store's refusal of a write, after which
// nothing was written, as opposed to an error whose outcome is in doubt.
func refused(err error) bool {
	for _, r := range []error{storage.ErrExist, storage.ErrPermission, storage.ErrReadOnly,
		storage.ErrLocked, storage.ErrBucketNotFound, storage.ErrInvalidKey} {
		if errors.Is(err, r) {
			return true
		}
	}
	return false
}

// ErrNotOwnObject is returned by RemoveOwnData when the data object under
// a manifest's key cannot be proven to be the one the manifest's run wrote.
var ErrNotOwnObject = errors.New("object was not written by this run")

// RemoveOwnData deletes the data object of m, which was never committed,
// if it carries m's run token in its metadata: the proof that it is the
// object m's run wrote rather than another run's under the same key. A
// missing object is not an error. Without that proof (no run token in m,
// or a bucket that keeps no metadata) it deletes nothing and returns an
// error matching ErrNotOwnObject.
func RemoveOwnData(ctx context.Context, b storage.Bucket, m *Manifest) error {
	key := ClusterPrefix(m.Cluster) + m.DataKey
	info, err := b.Stat(ctx, key)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return nil
	case err != nil:
		return err
	case m.Run == "" || info.Metadata[MetadataRun] != m.Run:
		return fmt.Errorf("%s: %w", key, ErrNotOwnObject)
	}
	return b.Delete(ctx, key)
}
