package s3_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/internal/smallfs"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// TestPutNoSpace runs MinIO on a 32 MiB file system and fills it: a put,
// streamed or not, exclusive or not, fails with storage.ErrNoSpace, shows
// no object and leaves no upload, and succeeds once space is freed.
func TestPutNoSpace(t *testing.T) {
	cases := map[string]func(ctx context.Context, b *s3.Bucket) error{
		"streamed": func(ctx context.Context, b *s3.Bucket) error { return b.Put(ctx, "big", stream(1, 12*mib), nil) },
		"sized": func(ctx context.Context, b *s3.Bucket) error {
			return b.Put(ctx, "big", bytes.NewReader(make([]byte, 4*mib)), nil)
		},
		"exclusive": func(ctx context.Context, b *s3.Bucket) error {
			return storage.PutIfAbsent(ctx, b, "big", stream(2, 12*mib), nil)
		},
	}
	for name, put := range cases {
		t.Run(name, func(t *testing.T) {
			// A server of its own: MinIO keeps what a delete removed in
			// its trash for a while, which a second case would count.
			fsDir := smallfs.Tmpfs(t, 32<<20)
			data := filepath.Join(fsDir, "data")
			require.NoError(t, os.Mkdir(data, 0o700))
			srv := miniotest.StartIn(t, data)
			b, bucket := newBucket(t, srv, false, nil)
			ctx := testCtx(t)
			require.NoError(t, b.Put(ctx, "keep", bytes.NewReader([]byte("x")), nil))

			filler := smallfs.FillTo(t, fsDir, "filler", 1*mib)
			err := put(ctx, b)
			require.ErrorIs(t, err, storage.ErrNoSpace)
			_, err = b.Stat(ctx, "big")
			require.ErrorIs(t, err, storage.ErrNotFound)
			for obj := range srv.Client(t).ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
				require.NoError(t, obj.Err)
				assert.Equal(t, "keep", obj.Key)
			}
			uploads, err := srv.IncompleteUploads(ctx, bucket)
			require.NoError(t, err)
			assert.Empty(t, uploads)

			// MinIO reads its drive's free space again within a few
			// seconds of a change.
			require.NoError(t, os.Remove(filler))
			var last error
			assert.Eventually(t, func() bool {
				last = put(ctx, b)
				return last == nil
			}, 30*time.Second, 250*time.Millisecond, "the put never succeeded after space was freed")
			require.NoError(t, last)
		})
	}
}
