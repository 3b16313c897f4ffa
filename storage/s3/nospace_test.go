package s3_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/internal/smallfs"
	"github.com/etcdbackup/etcdbackup/storage"
)

// TestPutNoSpace runs MinIO on a 32 MiB file system and fills it: a put,
// streamed or not, exclusive or not, fails with storage.ErrNoSpace, shows
// no object and leaves no upload, and succeeds once space is freed.
func TestPutNoSpace(t *testing.T) {
	fsDir := smallfs.Tmpfs(t, 32<<20)
	data := filepath.Join(fsDir, "data")
	require.NoError(t, os.Mkdir(data, 0o700))
	srv := miniotest.StartIn(t, data)
	b, name := newBucket(t, srv, false, nil)
	ctx := testCtx(t)
	require.NoError(t, b.Put(ctx, "keep", bytes.NewReader([]byte("x")), nil))

	cases := map[string]func(key string) error{
		"streamed": func(key string) error { return b.Put(ctx, key, stream(1, 12*mib), nil) },
		"sized":    func(key string) error { return b.Put(ctx, key, bytes.NewReader(make([]byte, 4*mib)), nil) },
		"exclusive": func(key string) error {
			return storage.PutIfAbsent(ctx, b, key, stream(2, 12*mib), nil)
		},
	}
	for name2, put := range cases {
		t.Run(name2, func(t *testing.T) {
			filler := smallfs.FillTo(t, fsDir, "filler", 1*mib)
			err := put("big")
			require.ErrorIs(t, err, storage.ErrNoSpace)
			_, err = b.Stat(ctx, "big")
			require.ErrorIs(t, err, storage.ErrNotFound)
			for obj := range srv.Client(t).ListObjects(ctx, name, minio.ListObjectsOptions{Recursive: true}) {
				require.NoError(t, obj.Err)
				assert.Equal(t, "keep", obj.Key)
			}
			uploads, err := srv.IncompleteUploads(ctx, name)
			require.NoError(t, err)
			assert.Empty(t, uploads)

			require.NoError(t, os.Remove(filler))
			require.NoError(t, put("big"))
			require.NoError(t, b.Delete(ctx, "big"))
		})
	}
}
