package backup_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"filippo.io/age"
	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

func newS3(t *testing.T, srv *miniotest.Server, bucket string) *s3.Bucket {
	t.Helper()
	opts := srv.S3Options(bucket)
	opts.PartSize, opts.PartsInFlight = 5<<20, 2
	b, err := s3.New(opts)
	require.NoError(t, err)
	return b
}

func newFile(t testing.TB) (*blob.Bucket, string) {
	t.Helper()
	dir := t.TempDir()
	b, err := blob.Open(t.Context(), drivers.NewURLMux(nil), "file://"+dir, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b, dir
}

func listKeys(t *testing.T, b storage.Bucket) []string {
	t.Helper()
	var out []string
	for info, err := range b.List(t.Context(), "") {
		require.NoError(t, err)
		out = append(out, info.Key)
	}
	return out
}

func readObject(t *testing.T, b storage.Bucket, key string) []byte {
	t.Helper()
	rc, err := b.Get(t.Context(), key)
	require.NoError(t, err)
	defer rc.Close()
	body, err := io.ReadAll(rc)
	require.NoError(t, err)
	return body
}

// TestBackupToMinIOAndFile backs up a real etcd to two MinIO buckets and a
// file destination from one snapshot read, then proves each stored object
// restores with etcd's own restore, hash check on.
func TestBackupToMinIOAndFile(t *testing.T) {
	ctx := t.Context()
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	filled, err := etcdtest.Fill(ctx, cli, etcdtest.FillOptions{Keys: 3000, Seed: 1})
	require.NoError(t, err)

	srv := miniotest.Start(t)
	s3a := newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{}))
	s3b := newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{}))
	file, _ := newFile(t)
	// A destination whose bucket does not exist fails on its own.
	missing := newS3(t, srv, "no-such-bucket")

	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	reads := &countingSnapshotter{inner: snapshotter}
	p := &backup.Pipeline{
		Snapshotter: reads,
		Encryption:  backup.Encryption{Recipients: []string{id.Recipient().String()}},
	}
	res, err := p.Run(ctx, backup.Request{Cluster: "prod-a", Name: "once", Targets: []backup.Target{
		{Destination: "s3-a", Uploader: &backup.BucketUploader{Bucket: s3a}},
		{Destination: "missing", Uploader: &backup.BucketUploader{Bucket: missing}},
		{Destination: "s3-b", Uploader: &backup.BucketUploader{Bucket: s3b}},
		{Destination: "local", Uploader: &backup.BucketUploader{Bucket: file}},
	}})
	require.Error(t, err, "the missing bucket fails")
	require.ErrorIs(t, err, storage.ErrBucketNotFound)
	require.Equal(t, []string{"s3-a", "s3-b", "local"}, res.Succeeded())
	require.Equal(t, 1, reads.n, "one snapshot read for every destination")
	require.GreaterOrEqual(t, res.Raw.Size, filled.Bytes())
	require.Less(t, res.Stored.Size, res.Raw.Size, "zstd made it smaller")
	t.Logf("raw %d bytes, stored %d bytes (%.2fx)", res.Raw.Size, res.Stored.Size, float64(res.Stored.Size)/float64(res.Raw.Size))

	for _, dest := range []struct {
		name string
		b    storage.Bucket
	}{{"s3-a", s3a}, {"s3-b", s3b}, {"local", file}} {
		t.Run(dest.name, func(t *testing.T) {
			ks := listKeys(t, dest.b)
			require.Len(t, ks, 2, "data and manifest: %v", ks)
			var manifestKey, dataKey string
			for _, k := range ks {
				if filepath.Ext(k) == ".json" {
					manifestKey = k
				} else {
					dataKey = k
				}
			}
			m, err := backup.ParseManifest(bytes.NewReader(readObject(t, dest.b, manifestKey)))
			require.NoError(t, err)
			require.Equal(t, dest.name, m.Destination)
			require.Equal(t, "prod-a/"+m.DataKey, dataKey)
			require.Equal(t, "prod-a-once", m.ID)
			require.NotEmpty(t, m.Etcd.MemberID)
			require.NotEmpty(t, m.Etcd.ClusterID)
			require.NotEmpty(t, m.Etcd.Version)
			require.LessOrEqual(t, m.Etcd.Revision.Low, m.Etcd.Revision.High)

			stored := readObject(t, dest.b, dataKey)
			sum := sha256.Sum256(stored)
			require.Equal(t, hex.EncodeToString(sum[:]), m.Stored.SHA256, "manifest sha256 matches the stored bytes")
			require.EqualValues(t, len(stored), m.Stored.Size)

			dec, err := backup.NewDecoder(bytes.NewReader(stored), m.Compression, id)
			require.NoError(t, err)
			raw, err := io.ReadAll(dec)
			require.NoError(t, err)
			require.NoError(t, dec.Close())
			rawSum := sha256.Sum256(raw)
			require.Equal(t, hex.EncodeToString(rawSum[:]), m.Raw.SHA256)

			restoreAndCheck(t, raw, cli, filled)
		})
	}
}

// restoreAndCheck restores a raw snapshot with etcd's own restore, hash
// check on, starts a member on it and compares a sample of keys with the
// live cluster.
func restoreAndCheck(t *testing.T, raw []byte, live *clientv3.Client, filled etcdtest.FillResult) {
	t.Helper()
	tmp := t.TempDir()
	snapPath := filepath.Join(tmp, "snapshot.db")
	require.NoError(t, os.WriteFile(snapPath, raw, 0o600))
	dataDir := filepath.Join(tmp, "member")
	err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        snapPath,
		Name:                "restored",
		OutputDataDir:       dataDir,
		PeerURLs:            []string{"http://127.0.0.1:2380"},
		InitialCluster:      "restored=http://127.0.0.1:2380",
		InitialClusterToken: "restored",
		SkipHashCheck:       false,
	})
	require.NoError(t, err, "etcd's restore with hash check")

	restored := etcdtest.Start(t, etcdtest.WithDataDir(dataDir), etcdtest.WithName("restored"))
	rcli := restored.Client(t)
	for _, i := range []int{0, 1, filled.Keys / 2, filled.Keys - 1} {
		key := etcdtest.FillKey("", i)
		want, err := live.Get(t.Context(), key)
		require.NoError(t, err)
		require.Len(t, want.Kvs, 1, "key %s in the live cluster", key)
		got, err := rcli.Get(t.Context(), key)
		require.NoError(t, err)
		require.Len(t, got.Kvs, 1, "key %s restored", key)
		require.Equal(t, want.Kvs[0].Value, got.Kvs[0].Value)
	}
	count, err := rcli.Get(t.Context(), "", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	require.GreaterOrEqual(t, count.Count, int64(filled.Keys))
}

type countingSnapshotter struct {
	inner backup.Snapshotter
	n     int
}

func (c *countingSnapshotter) Snapshot(ctx context.Context) (*backup.Snapshot, error) {
	c.n++
	return c.inner.Snapshot(ctx)
}

// TestDamagedSnapshotLeavesNothingOnMinIO feeds the pipeline snapshots
// large enough for multipart uploads, damaged three ways, and checks that
// no object and no incomplete upload remain.
func TestDamagedSnapshotLeavesNothingOnMinIO(t *testing.T) {
	srv := miniotest.Start(t)
	good := fakeSnapshot(t, 24<<20/512, 9) // 24 MiB: several 5 MiB parts
	flipped := bytes.Clone(good)
	flipped[len(flipped)-1000] ^= 0x01
	cases := map[string][]byte{
		"flipped bit": flipped,
		"truncated":   good[:len(good)-7],
		"no trailer":  good[:len(good)-32],
	}
	for name, stream := range cases {
		t.Run(name, func(t *testing.T) {
			bucket := srv.NewBucket(t, miniotest.BucketOptions{})
			b := newS3(t, srv, bucket)
			file, _ := newFile(t)
			p := &backup.Pipeline{Snapshotter: newSnapshotter(stream), Compression: backup.None}
			res, err := p.Run(t.Context(), backup.Request{Cluster: "c", Name: "n", Targets: []backup.Target{
				{Destination: "s3", Uploader: &backup.BucketUploader{Bucket: b}},
				{Destination: "file", Uploader: &backup.BucketUploader{Bucket: file}},
			}})
			require.ErrorIs(t, err, backup.ErrSnapshotIntegrity)
			require.Empty(t, res.Succeeded())
			require.Empty(t, listKeys(t, b), "no object on MinIO")
			require.Empty(t, listKeys(t, file), "no file")
			objs := slices.Collect(func(yield func(minio.ObjectInfo) bool) {
				for o := range srv.Client(t).ListObjects(t.Context(), bucket, minio.ListObjectsOptions{Recursive: true}) {
					if !yield(o) {
						return
					}
				}
			})
			require.Empty(t, objs)
			uploads, err := srv.IncompleteUploads(t.Context(), bucket)
			require.NoError(t, err)
			require.Empty(t, uploads, "no incomplete multipart upload")
		})
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
