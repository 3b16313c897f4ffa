package restore_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/backup/backuptest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// fakeSnapshot returns bytes shaped like an etcd snapshot stream: whole
// 512-byte blocks with some structure, then their sha256. It is no bbolt
// database: enough for fetching, not for restoring.
func fakeSnapshot(blocks int, seed uint64) []byte {
	return backuptest.Stream(blocks, seed)
}

// streamSnapshotter serves a fixed stream through backup.NewSnapshot.
type streamSnapshotter struct{ stream []byte }

func (s streamSnapshotter) Snapshot(context.Context) (*backup.Snapshot, error) {
	info := backup.SnapshotInfo{Endpoint: "fake", MemberID: 0xabc, ClusterID: 0xdef, EtcdVersion: "3.7.3", RevisionLow: 41}
	return backup.NewSnapshot(io.NopCloser(bytes.NewReader(s.stream)), info, func(i backup.SnapshotInfo) (backup.SnapshotInfo, error) {
		i.RevisionHigh = 42
		return i, nil
	}), nil
}

// fileSnapshotter serves a snapshot file.
type fileSnapshotter struct{ path string }

func (s fileSnapshotter) Snapshot(context.Context) (*backup.Snapshot, error) {
	f, err := os.Open(s.path)
	if err != nil {
		return nil, err
	}
	return backup.NewSnapshot(f, backup.SnapshotInfo{Endpoint: "file"}, nil), nil
}

func memBucket(t *testing.T) *blob.Bucket {
	t.Helper()
	b, err := blob.Open(t.Context(), drivers.NewURLMux(nil), "mem://", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func newS3(t *testing.T, srv *miniotest.Server, bucket string) *s3.Bucket {
	t.Helper()
	opts := srv.S3Options(bucket)
	opts.PartSize, opts.PartsInFlight = 5<<20, 2
	b, err := s3.New(opts)
	require.NoError(t, err)
	return b
}

// runBackup backs up the snapshotter's stream to b with the given encoding.
func runBackup(t *testing.T, snap backup.Snapshotter, b storage.Bucket, cluster, name string, c backup.Compression, recipients ...string) *backup.Manifest {
	t.Helper()
	p := &backup.Pipeline{Snapshotter: snap, Compression: c, Encryption: backup.Encryption{Recipients: recipients}}
	res, err := p.Run(t.Context(), backup.Request{Cluster: cluster, Name: name, Targets: []backup.Target{
		{Destination: "dest", Uploader: &backup.BucketUploader{Bucket: b}},
	}})
	require.NoError(t, err)
	return res.Outcomes[0].Manifest
}

func readAll(t *testing.T, b storage.Bucket, key string) []byte {
	t.Helper()
	rc, err := b.Get(t.Context(), key)
	require.NoError(t, err)
	defer rc.Close()
	body, err := io.ReadAll(rc)
	require.NoError(t, err)
	return body
}

// put writes an object; it works in cleanups too, where t.Context is done.
func put(t *testing.T, b storage.Bucket, key string, body []byte) {
	t.Helper()
	require.NoError(t, b.Put(context.Background(), key, bytes.NewReader(body), nil))
}

// dirEntries lists a directory's names.
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names
}

func requireNothingAt(t *testing.T, path string) {
	t.Helper()
	_, err := os.Lstat(path)
	require.ErrorIs(t, err, os.ErrNotExist, "%s must not exist", path)
	_, err = os.Lstat(path + ".part")
	require.ErrorIs(t, err, os.ErrNotExist, "%s.part must not exist", path)
	require.Empty(t, dirEntries(t, filepath.Dir(path)), "nothing left next to %s", path)
}

// recorder keeps events.
type recorder struct {
	mu     sync.Mutex
	events []restore.Event
}

func (r *recorder) Observe(e restore.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) kinds() []restore.EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []restore.EventKind
	for _, e := range r.events {
		if len(out) == 0 || out[len(out)-1] != e.Kind {
			out = append(out, e.Kind)
		}
	}
	return out
}

// stepClock advances by step at every call, so every Read is past the
// progress interval.
func stepClock(step time.Duration) func() time.Time {
	var mu sync.Mutex
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(step)
		return now
	}
}

// smallSnapshot returns testdata/three-keys.db.gz uncompressed: a real
// snapshot saved by etcd's client, holding three keys at revision 4.
func smallSnapshot(t testing.TB) []byte {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "three-keys.db.gz"))
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	raw, err := io.ReadAll(zr)
	require.NoError(t, err)
	return raw
}

// writeFile writes body to a new file in a new temporary directory.
func writeFile(t *testing.T, name string, body []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, body, 0o600))
	return path
}

func sha256Of(b []byte) []byte {
	sum := sha256.Sum256(b)
	return sum[:]
}

// gunzip reads a gzip file whole; for examples, which have no testing.T.
func gunzip(path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		panic(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		panic(err)
	}
	return raw
}

func benchBucket(b *testing.B) (*blob.Bucket, string) {
	b.Helper()
	dir := b.TempDir()
	bucket, err := blob.Open(b.Context(), drivers.NewURLMux(nil), "file://"+filepath.Join(dir)+"?metadata=skip", nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = bucket.Close() })
	return bucket, dir
}
