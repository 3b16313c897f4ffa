package restore_test

import (
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/restore"
)

// zstdZeros returns a zstd stream of n zero bytes: a few KiB.
func zstdZeros(t *testing.T, n int) []byte {
	t.Helper()
	return encode(t, make([]byte, n), func(w io.Writer) io.WriteCloser {
		z, err := zstd.NewWriter(w)
		require.NoError(t, err)
		return z
	})
}

// maxRaw returns the most decoded bytes a progress event reported.
func (r *recorder) maxRaw() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var m int64
	for _, e := range r.events {
		m = max(m, e.RawBytes)
	}
	return m
}

// TestFetchStopsAtTheRawSize: a small object that decodes to far more
// than its manifest's raw size, in place of a backup on MinIO, stops the
// fetch at that size; a legacy object stops at MaxRawSize.
func TestFetchStopsAtTheRawSize(t *testing.T) {
	srv := miniotest.Start(t)
	b := newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{}))
	stream := fakeSnapshot(2000, 3) // 1 MiB
	m := runBackup(t, streamSnapshotter{stream}, b, "prod-a", "n", backup.Zstd)
	bomb := zstdZeros(t, 64<<20)
	require.Less(t, len(bomb), int(m.Stored.Size), "the bomb is smaller than the object it replaces")
	found, err := restore.Find(t.Context(), []restore.Source{{Name: "minio", Catalog: b}}, restore.Query{Cluster: "prod-a"})
	require.NoError(t, err)
	put(t, b, found.Key, bomb)

	rec := &recorder{}
	r := &restore.Restorer{Observer: rec, Now: stepClock(time.Second), ProgressInterval: time.Second}
	target := filepath.Join(t.TempDir(), "snapshot.db")
	_, err = r.Fetch(t.Context(), found, target)
	require.ErrorIs(t, err, restore.ErrIntegrity)
	require.LessOrEqual(t, rec.maxRaw(), m.Raw.Size, "decoded bytes past the manifest's raw size were written")
	requireNothingAt(t, target)

	put(t, b, "prod-a/legacy.db.zst", bomb)
	legacy, err := restore.Find(t.Context(), []restore.Source{{Name: "minio", Catalog: b}}, restore.Query{Cluster: "prod-a", ID: "legacy.db.zst"})
	require.NoError(t, err)
	rec = &recorder{}
	r = &restore.Restorer{Observer: rec, Now: stepClock(time.Second), ProgressInterval: time.Second, MaxRawSize: 4 << 20}
	_, err = r.Fetch(t.Context(), legacy, filepath.Join(t.TempDir(), "legacy.db"))
	require.ErrorIs(t, err, restore.ErrIntegrity)
	require.LessOrEqual(t, rec.maxRaw(), int64(4<<20))
}

func TestRawLimit(t *testing.T) {
	r := &restore.Restorer{}
	require.Equal(t, restore.DefaultMaxRawSize, r.RawLimit(0))
	require.EqualValues(t, 100, r.RawLimit(100))
	require.Equal(t, restore.DefaultMaxRawSize, r.RawLimit(restore.DefaultMaxRawSize*2), "a manifest cannot raise the bound")
	r.MaxRawSize = 10
	require.EqualValues(t, 10, r.RawLimit(100))
	require.EqualValues(t, 5, r.RawLimit(5))
}

// TestImportStopsAtMaxBytes: Import copies at most MaxBytes of its reader.
func TestImportStopsAtMaxBytes(t *testing.T) {
	dir := t.TempDir()
	src := &countingReader{r: io.LimitReader(zeroReader{}, 64<<20)}
	im := &restore.Importer{MaxBytes: 1 << 20, TempDir: dir}
	_, err := im.Import(t.Context(), src)
	require.ErrorIs(t, err, restore.ErrImport)
	require.ErrorContains(t, err, "larger than 1048576 bytes")
	require.LessOrEqual(t, src.n, int64(2<<20), "read far past MaxBytes")
	require.Empty(t, dirEntries(t, dir))
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
