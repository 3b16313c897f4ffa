package backuptest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"gocloud.dev/blob/memblob"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// Destinations are named in-memory buckets: the same storage.Bucket a
// mem:// destination opens, with every behaviour of the real store
// (listing, exclusive creates, errors), and nothing on disk or network.
// Their methods have the shapes schedule.PipelineRunner asks for:
//
//	dests := backuptest.NewDestinations("s3-eu", "gcs")
//	runner := &schedule.PipelineRunner{Uploader: dests.Uploader, Store: dests.Store, ...}
type Destinations struct {
	buckets map[string]*blob.Bucket
}

// NewDestinations returns empty in-memory destinations of these names.
// Close releases them.
func NewDestinations(names ...string) *Destinations {
	d := &Destinations{buckets: map[string]*blob.Bucket{}}
	for _, n := range names {
		d.buckets[n] = blob.New(memblob.OpenBucket(nil), nil)
	}
	return d
}

// Bucket returns the bucket of the destination name, or nil when there is
// none.
func (d *Destinations) Bucket(name string) storage.Bucket {
	b, ok := d.buckets[name]
	if !ok {
		return nil
	}
	return b
}

func (d *Destinations) get(name string) (*blob.Bucket, error) {
	b, ok := d.buckets[name]
	if !ok {
		return nil, fmt.Errorf("destination %q: %w", name, storage.ErrNotFound)
	}
	return b, nil
}

// Uploader returns the uploader of the destination name; an unknown name
// is an error matching storage.ErrNotFound, as are Store's and Catalog's.
func (d *Destinations) Uploader(_ context.Context, name string) (backup.Uploader, error) {
	b, err := d.get(name)
	if err != nil {
		return nil, err
	}
	return &backup.BucketUploader{Bucket: b}, nil
}

// Store returns the destination name as retention sees it.
func (d *Destinations) Store(_ context.Context, name string) (retention.Store, error) {
	return d.get(name)
}

// Catalog returns the destination name as listing and restore see it.
func (d *Destinations) Catalog(_ context.Context, name string) (backup.Catalog, error) {
	return d.get(name)
}

// Close releases the buckets.
func (d *Destinations) Close() error {
	for _, b := range d.buckets {
		_ = b.Close()
	}
	return nil
}

// Backups returns the backups (snapshots and logical backups) a catalog
// holds for cluster, oldest first (backup.ListBackups' order), after checking each: its manifest is
// valid and its data object has the size and sha256 the manifest records
// as stored. It fails on the first backup that does not check, and on
// an entry of the cluster's folder that is not a backup of this library
// other than delta segments (an orphan data object, an invalid manifest):
// what a run left behind is what a test wants to see.
func Backups(ctx context.Context, c backup.Catalog, cluster string) ([]backup.Entry, error) {
	entries, err := backup.ListBackups(ctx, c, cluster)
	if err != nil {
		return nil, err
	}
	var out []backup.Entry
	for _, e := range entries {
		switch e.Kind {
		case backup.KindBackup, backup.KindKeysJSON:
		case backup.KindDelta:
			continue
		default:
			return nil, fmt.Errorf("%s is %s, not a backup: %v", e.Key, e.Kind, e.Problem)
		}
		if err := checkStored(ctx, c, e); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// checkStored compares e's data object with its manifest.
func checkStored(ctx context.Context, c backup.Catalog, e backup.Entry) error {
	rc, err := c.Get(ctx, e.Key)
	if err != nil {
		return fmt.Errorf("get %s: %w", e.Key, err)
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(h, rc)
	if err != nil {
		return fmt.Errorf("read %s: %w", e.Key, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); n != e.Manifest.Stored.Size || sum != e.Manifest.Stored.SHA256 {
		return fmt.Errorf("%s holds %d bytes of sha256 %s, its manifest says %d bytes of sha256 %s",
			e.Key, n, sum, e.Manifest.Stored.Size, e.Manifest.Stored.SHA256)
	}
	return nil
}
