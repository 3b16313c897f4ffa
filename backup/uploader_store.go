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

// Store implements Storer on a bucket that stages objects (a file
// destination): the manifest is never visible before its data object is
// durable under its name. Through storage.PairStager the bucket stores
// the data object and stages the manifest in one call (on a file system
// whose syncs the bucket's puts share, one wait for the disk), then the
// manifest is named: two waits where Upload and Commit take six. Through
// storage.Stager the data object and the manifest are written and synced
// at once, then the data object is named, durably, then the manifest:
// three waits. A manifest whose write fails is handled as Commit handles
// it (read back, the data object removed only when the store refused the
// write). Once the data object is named, the manifest is named whether or
// not ctx ends meanwhile, within CleanupTimeout, unless a publish bound of
// ctx (a follower's lost lock) ends first. Other buckets fail with
// storage.ErrUnsupported.
func (u *BucketUploader) Store(ctx context.Context, m *Manifest, r io.Reader) (bool, error) {
	if err := validateDataKey(m.DataKey); err != nil {
		return false, fmt.Errorf("%w: data key: %v", ErrInvalidManifest, err)
	}
	body, err := m.Marshal()
	if err != nil {
		return false, err
	}
	dataKey := ClusterPrefix(m.Cluster) + m.DataKey
	manifestKey := ClusterPrefix(m.Cluster) + ManifestKey(m.DataKey)
	data := storage.StagePut{Key: dataKey, Body: faultpoint.Reader("upload-streaming", r), Options: dataPutOptions(m)}
	man := storage.StagePut{Key: manifestKey, Body: bytes.NewReader(body), Options: manifestPutOptions()}
	manifest, err := u.stagePair(ctx, data, man)
	if err != nil {
		return false, err
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

// stagePair stores the data object and stages the manifest, through the
// bucket's storage.PairStager, else its storage.Stager; on an error
// nothing of either is left.
func (u *BucketUploader) stagePair(ctx context.Context, data, man storage.StagePut) (storage.Staged, error) {
	if ps, ok := u.Bucket.(storage.PairStager); ok {
		// What a refusal read of the bodies could not be staged again.
		dr, mr := &countingReader{r: data.Body}, &countingReader{r: man.Body}
		s, err := ps.PutThenStage(ctx, storage.StagePut{Key: data.Key, Body: dr, Options: data.Options},
			storage.StagePut{Key: man.Key, Body: mr, Options: man.Options})
		var se *storage.Error
		switch {
		case err == nil:
			return s, nil
		case errors.As(err, &se) && se.Key == man.Key:
			return nil, manifestStageFailed(man.Key, err)
		case !errors.Is(err, storage.ErrUnsupported):
			return nil, dataExists(data.Key, err)
		case dr.n > 0 || mr.n > 0:
			// Not ErrUnsupported: Store's caller would upload what is
			// left of r.
			return nil, fmt.Errorf("store: the bucket read the bodies, then refused: %v", err)
		}
	}
	st, ok := u.Bucket.(storage.Stager)
	if !ok {
		return nil, fmt.Errorf("store in one call: %w", storage.ErrUnsupported)
	}
	var (
		manifest storage.Staged
		merr     error
		staged   = make(chan struct{})
	)
	go func() {
		defer close(staged)
		manifest, merr = st.Stage(ctx, man.Key, man.Body, man.Options)
	}()
	dataStaged, derr := st.Stage(ctx, data.Key, data.Body, data.Options)
	<-staged
	if derr != nil || merr != nil {
		for _, s := range []storage.Staged{dataStaged, manifest} {
			if s != nil {
				s.Discard(ctx)
			}
		}
		if derr != nil {
			return nil, dataExists(data.Key, derr)
		}
		return nil, manifestStageFailed(man.Key, merr)
	}
	if err := dataStaged.Publish(ctx); err != nil {
		manifest.Discard(ctx)
		return nil, dataExists(data.Key, err)
	}
	return manifest, nil
}

// manifestStageFailed is the error of a manifest that could not be staged.
func manifestStageFailed(key string, err error) error {
	if errors.Is(err, storage.ErrExist) {
		return fmt.Errorf("%w: %s: %w", ErrBackupExists, key, err)
	}
	return fmt.Errorf("write manifest: %w", err)
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
