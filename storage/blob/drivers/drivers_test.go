package drivers_test

import (
	"context"
	"fmt"
	"log"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	gcblob "gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
)

func TestNewURLMux(t *testing.T) {
	a, b := drivers.NewURLMux(nil), drivers.NewURLMux(nil)
	require.NotSame(t, a, b)
	want := []string{"azblob", "file", "gs", "mem", "s3"}
	assert.Equal(t, want, a.BucketSchemes())
	assert.Equal(t, want, b.BucketSchemes())
}

func TestMemAndFile(t *testing.T) {
	ctx := t.Context()
	mux := drivers.NewURLMux(nil)
	dir := t.TempDir()
	for _, u := range []string{"mem://", "file://" + dir, "file://" + dir + "?metadata=skip&prefix=sub/"} {
		t.Run(u, func(t *testing.T) {
			b, err := blob.Open(ctx, mux, u, nil)
			require.NoError(t, err)
			defer func() { require.NoError(t, b.Close()) }()
			require.NoError(t, b.Put(ctx, "a/k", strings.NewReader("v"), nil))
			var keys []string
			for info, err := range b.List(ctx, "") {
				require.NoError(t, err)
				keys = append(keys, info.Key)
			}
			assert.Contains(t, keys, "a/k")
		})
	}
	// The prefix parameter put the last object under sub/.
	_, err := os.Stat(filepath.Join(dir, "sub", "a", "k"))
	require.NoError(t, err)
}

func TestCloudURLsNameBucketsByHostOnly(t *testing.T) {
	mux := drivers.NewURLMux(nil)
	for _, u := range []string{"s3://bucket/backups?region=us-east-1", "gs://bucket/backups", "azblob://container/backups"} {
		_, err := blob.Open(t.Context(), mux, u, nil)
		require.Error(t, err, u)
		assert.Contains(t, err.Error(), "use the prefix parameter", u)
	}
}

// countingOpener opens memory buckets and counts the URLs it saw.
type countingOpener struct{ urls []string }

func (o *countingOpener) OpenBucketURL(_ context.Context, u *url.URL) (*gcblob.Bucket, error) {
	o.urls = append(o.urls, u.String())
	return memblob.OpenBucket(nil), nil
}

func TestOptionsReplaceOpeners(t *testing.T) {
	mem, s3 := &countingOpener{}, &countingOpener{}
	mux := drivers.NewURLMux(&drivers.Options{Mem: mem, S3: s3})
	for _, u := range []string{"mem://x", "s3://bucket?anything=1"} {
		b, err := blob.Open(t.Context(), mux, u, nil)
		require.NoError(t, err)
		require.NoError(t, b.Close())
	}
	assert.Equal(t, []string{"mem://x"}, mem.urls)
	assert.Equal(t, []string{"s3://bucket?anything=1"}, s3.urls)
	// The path check wraps a replaced opener too.
	_, err := blob.Open(t.Context(), mux, "s3://bucket/path", nil)
	require.Error(t, err)
	assert.Len(t, s3.urls, 1)
}

// TestS3URL opens MinIO through an s3:// URL as a host would, with
// credentials from the environment.
func TestS3URL(t *testing.T) {
	srv := miniotest.Start(t)
	name := srv.NewBucket(t, miniotest.BucketOptions{})
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey())
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey())
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_REGION", "")

	u := fmt.Sprintf("s3://%s?endpoint=http://%s&region=us-east-1&use_path_style=true&prefix=backups/", name, srv.Endpoint())
	b, err := blob.Open(t.Context(), drivers.NewURLMux(nil), u, &blob.Options{PartSize: 5 << 20})
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	ctx := t.Context()

	require.NoError(t, b.Put(ctx, "prod-a/snap.db", strings.NewReader("data"), nil))
	info, err := srv.Client(t).StatObject(ctx, name, "backups/prod-a/snap.db", minio.StatObjectOptions{})
	require.NoError(t, err)
	assert.EqualValues(t, 4, info.Size)

	// A failed multipart Put leaves no upload, prefix and all.
	err = b.Put(ctx, "prod-a/big.db", &failing{n: 17 << 20}, nil)
	require.ErrorIs(t, err, errFailing)
	ups, err := srv.IncompleteUploads(ctx, name)
	require.NoError(t, err)
	assert.Empty(t, ups)

	var keys []string
	for info, err := range b.List(ctx, "") {
		require.NoError(t, err)
		keys = append(keys, info.Key)
	}
	assert.Equal(t, []string{"prod-a/snap.db"}, keys)
	for _, err := range b.IncompleteUploads(ctx, "") {
		require.NoError(t, err)
	}

	_, err = b.Stat(ctx, "prod-a/none")
	require.ErrorIs(t, err, storage.ErrNotFound)
}

var errFailing = fmt.Errorf("body failed")

type failing struct{ n int }

func (f *failing) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errFailing
	}
	p = p[:min(len(p), f.n)]
	clear(p)
	f.n -= len(p)
	return len(p), nil
}

func ExampleNewURLMux() {
	ctx := context.Background()
	mux := drivers.NewURLMux(nil)

	dir, err := os.MkdirTemp("", "backups")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	b, err := blob.Open(ctx, mux, "file://"+dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	if err := b.Put(ctx, "prod-a/snapshot.db", strings.NewReader("etcd snapshot"), nil); err != nil {
		log.Fatal(err)
	}
	info, err := b.Stat(ctx, "prod-a/snapshot.db")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.Key, info.Size)
	fmt.Println(mux.BucketSchemes())
	// Output:
	// prod-a/snapshot.db 13
	// [azblob file gs mem s3]
}
