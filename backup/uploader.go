package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

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
// already exists: a one-shot backup name used twice, or two scheduled runs
// in the same second.
var ErrBackupExists = errors.New("backup already exists")

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

var _ Uploader = (*BucketUploader)(nil)

// ClusterPrefix returns the folder of a cluster's objects, with its trailing
// slash, so that "prod-a/" never lists "prod-ab/...".
func ClusterPrefix(cluster string) string { return cluster + "/" }

// Upload implements Uploader. It never overwrites an existing object.
func (u *BucketUploader) Upload(ctx context.Context, m *Manifest, r io.Reader) error {
	if err := validateDataKey(m.DataKey); err != nil {
		return fmt.Errorf("%w: data key: %v", ErrInvalidManifest, err)
	}
	key := ClusterPrefix(m.Cluster) + m.DataKey
	err := storage.PutIfAbsent(ctx, u.Bucket, key, r, &storage.PutOptions{
		Metadata: map[string]string{"etcdbackup-id": m.ID},
	})
	if errors.Is(err, storage.ErrExist) {
		return fmt.Errorf("%w: %s: %w", ErrBackupExists, key, err)
	}
	return err
}

// Commit implements Uploader. It never overwrites an existing manifest. If
// the manifest cannot be written, it removes the data object Upload wrote
// (on a context of its own, so a cancelled backup is cleaned up too) and
// returns the error; what it cannot remove is an orphan that retention
// collects.
func (u *BucketUploader) Commit(ctx context.Context, m *Manifest) error {
	body, err := m.Marshal()
	if err != nil {
		return err
	}
	key := ClusterPrefix(m.Cluster) + ManifestKey(m.DataKey)
	err = storage.PutIfAbsent(ctx, u.Bucket, key, bytes.NewReader(body), &storage.PutOptions{ContentType: "application/json"})
	if err == nil {
		return nil
	}
	if errors.Is(err, storage.ErrExist) {
		// Another backup's manifest (same ID and second, another encoding).
		// The data object is ours all the same: Upload never overwrites.
		err = fmt.Errorf("%w: %s: %w", ErrBackupExists, key, err)
	}
	timeout := u.CleanupTimeout
	if timeout == 0 {
		timeout = time.Minute
	}
	cleanupCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if derr := u.Bucket.Delete(cleanupCtx, ClusterPrefix(m.Cluster)+m.DataKey); derr != nil {
		return fmt.Errorf("write manifest: %w (and the data object was left for retention to collect: %v)", err, derr)
	}
	return fmt.Errorf("write manifest: %w", err)
}
