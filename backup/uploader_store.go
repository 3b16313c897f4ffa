package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/etcdbackup/etcdbackup/internal/cleanup"
	"github.com/etcdbackup/etcdbackup/internal/faultpoint"
	"github.com/etcdbackup/etcdbackup/storage"
)

// Storer is implemented by Uploaders that can store a backup whose
// manifest is complete before its upload starts (a continuous backup's
// segment, whose bytes are in memory) in one call, faster than Upload then
// Commit. The follower stores segments through it when its target's
// Uploader has it. It is found by a type assertion: a type that embeds a
// BucketUploader or a destination.Destination and overrides Upload or
// Commit inherits Store, which bypasses them, unless it overrides Store
// too.
type Storer interface {
	// Store is Upload of r then Commit of m, with their errors. An error
	// matching storage.ErrUnsupported with committing false says that
	// the Uploader cannot store so, having left nothing: the caller then
	// calls Upload and Commit. committing reports that the data object
	// was stored and the manifest's write began: an error then leaves the
	// commit in doubt, as an error of Commit does.
	Store(ctx context.Context, m *Manifest, r io.Reader) (committing bool, err error)
}

var _ Storer = (*BucketUploader)(nil)

// Store implements Storer on a bucket that stages objects (storage.Stager:
// a file destination). The data object and the manifest are written and
// synced at once, so that their waits for stable storage overlap; then the
// data object is named, durably; then the manifest: a manifest is never
// visible before its data object is durable under its name. On a file
// system that is three waits for the disk where Upload and Commit take
// six. A manifest whose write fails is handled as Commit handles it (read
// back, the data object removed only when the store refused the write).
// Once the data object is named, the manifest is named whether or not
// ctx ends meanwhile, within CleanupTimeout, unless a publish bound of
// ctx (a follower's lost lock) ends first. Other buckets fail with
// storage.ErrUnsupported.
func (u *BucketUploader) Store(ctx context.Context, m *Manifest, r io.Reader) (bool, error) {
	st, ok := u.Bucket.(storage.Stager)
	if !ok {
		return false, fmt.Errorf("store in one call: %w", storage.ErrUnsupported)
	}
	if err := validateDataKey(m.DataKey); err != nil {
		return false, fmt.Errorf("%w: data key: %v", ErrInvalidManifest, err)
	}
	body, err := m.Marshal()
	if err != nil {
		return false, err
	}
	dataKey := ClusterPrefix(m.Cluster) + m.DataKey
	manifestKey := ClusterPrefix(m.Cluster) + ManifestKey(m.DataKey)
	var (
		manifest storage.Staged
		merr     error
		staged   = make(chan struct{})
	)
	go func() {
		defer close(staged)
		manifest, merr = st.Stage(ctx, manifestKey, bytes.NewReader(body), manifestPutOptions())
	}()
	data, derr := st.Stage(ctx, dataKey, faultpoint.Reader("upload-streaming", r), dataPutOptions(m))
	<-staged
	if derr != nil || merr != nil {
		for _, s := range []storage.Staged{data, manifest} {
			if s != nil {
				s.Discard(ctx)
			}
		}
		switch {
		case derr != nil:
			return false, dataExists(dataKey, derr)
		case errors.Is(merr, storage.ErrExist):
			return false, fmt.Errorf("%w: %s: %w", ErrBackupExists, manifestKey, merr)
		}
		return false, fmt.Errorf("write manifest: %w", merr)
	}
	if err := data.Publish(ctx); err != nil {
		manifest.Discard(ctx)
		return false, dataExists(dataKey, err)
	}
	faultpoint.Hit("data-stored")
	// The manifest is staged, durable: naming it is a few file-system
	// calls, which an end of ctx in between would only turn into a data
	// object kept for a manifest in doubt. A bound on publishing (a lost
	// lock: cleanup.PublishBound) still stops it.
	pctx, cancel := cleanup.Publish(ctx, u.cleanupTimeout())
	defer cancel()
	if err := manifest.Publish(pctx); err != nil {
		return true, u.commitFailed(ctx, m, manifestKey, body, err)
	}
	faultpoint.Hit("manifest-stored")
	return true, nil
}
