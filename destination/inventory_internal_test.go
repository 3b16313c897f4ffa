package destination

import (
	"context"
	"crypto/sha256"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/memblob"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// countingBucket counts Gets.
type countingBucket struct {
	storage.Bucket
	gets atomic.Int32
}

func (b *countingBucket) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	b.gets.Add(1)
	return b.Bucket.Get(ctx, key)
}

// A sync reads only the manifests that changed since the last one.
func TestInventoryReadsChangedManifestsOnly(t *testing.T) {
	ctx := context.Background()
	gb := memblob.OpenBucket(nil)
	t.Cleanup(func() { _ = gb.Close() })
	b := &countingBucket{Bucket: blob.New(gb, nil)}

	body := strings.Repeat("x", 512)
	sum := sha256.Sum256([]byte(body))
	raw := body + string(sum[:])
	for i, name := range []string{"one", "two", "three"} {
		p := backup.Pipeline{Snapshotter: rawSnapshotter(raw), Compression: backup.None,
			Now: func() time.Time { return time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC) }}
		_, err := p.Run(ctx, backup.Request{Cluster: "prod-a", Name: name,
			Targets: []backup.Target{{Destination: "d", Uploader: &backup.BucketUploader{Bucket: b}}}})
		require.NoError(t, err)
	}

	b.gets.Store(0)
	entries, cache, err := listInventory(ctx, "d", b, nil, nil)
	require.NoError(t, err)
	require.Len(t, entries, 3)
	assert.EqualValues(t, 3, b.gets.Load(), "first sync reads every manifest")

	b.gets.Store(0)
	entries, cache, err = listInventory(ctx, "d", b, cache, nil)
	require.NoError(t, err)
	require.Len(t, entries, 3)
	assert.EqualValues(t, 0, b.gets.Load(), "nothing changed: nothing read")

	// Rewrite one manifest: only that one is read again.
	key := entries[1].ManifestKey
	rc, err := b.Get(ctx, key)
	require.NoError(t, err)
	m, err := backup.ParseManifest(rc)
	require.NoError(t, err)
	rc.Close()
	m.Library = "renamed"
	data, err := m.Marshal()
	require.NoError(t, err)
	require.NoError(t, b.Put(ctx, key, strings.NewReader(string(data)+"\n"), nil))

	b.gets.Store(0)
	entries, _, err = listInventory(ctx, "d", b, cache, nil)
	require.NoError(t, err)
	assert.EqualValues(t, 1, b.gets.Load())
	assert.Equal(t, "renamed", entries[1].Manifest.Library)
	assert.Len(t, cache, 3)
}

type rawSnapshotter string

func (s rawSnapshotter) Snapshot(context.Context) (*backup.Snapshot, error) {
	return backup.NewSnapshot(io.NopCloser(strings.NewReader(string(s))), backup.SnapshotInfo{}, nil), nil
}

func sha256Sum(b []byte) [32]byte { return sha256.Sum256(b) }
