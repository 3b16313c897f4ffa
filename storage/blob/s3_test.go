package blob_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"gocloud.dev/blob/s3blob"

	"github.com/etcdbackup/etcdbackup/internal/faultproxy"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/storagetest"
)

// s3Fixture is an s3blob bucket on the MinIO server srv.
type s3Fixture struct {
	srv    *miniotest.Server
	name   string
	client *s3.Client
	bucket *blob.Bucket
}

// newS3Client returns an AWS SDK client for srv whose idle connections are
// closed when t ends.
func newS3Client(t *testing.T, srv *miniotest.Server, access, secret string) *s3.Client {
	t.Helper()
	return newS3ClientAt(t, srv.Endpoint(), access, secret)
}

// newS3ClientAt is newS3Client for a server at endpoint (host:port): a
// fault proxy in front of MinIO.
func newS3ClientAt(t *testing.T, endpoint, access, secret string) *s3.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	httpClient := &http.Client{Transport: tr}
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String("http://" + endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(access, secret, ""),
		HTTPClient:   httpClient,
	})
}

func newS3Fixture(t *testing.T, srv *miniotest.Server, opts *blob.Options) *s3Fixture {
	t.Helper()
	return newS3FixtureAt(t, srv, srv.Endpoint(), opts)
}

// newS3FixtureAt is newS3Fixture with the client talking to endpoint.
func newS3FixtureAt(t *testing.T, srv *miniotest.Server, endpoint string, opts *blob.Options) *s3Fixture {
	t.Helper()
	f := &s3Fixture{srv: srv, name: srv.NewBucket(t, miniotest.BucketOptions{})}
	f.client = newS3ClientAt(t, endpoint, srv.AccessKey(), srv.SecretKey())
	gb, err := s3blob.OpenBucket(t.Context(), f.client, f.name, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = gb.Close() })
	f.bucket = blob.New(gb, opts)
	return f
}

func (f *s3Fixture) uploads(t *testing.T) []storage.Upload {
	t.Helper()
	ups, err := f.srv.IncompleteUploads(context.Background(), f.name)
	require.NoError(t, err)
	return ups
}

// failAfter is a body that fails after n bytes, long enough to make the
// transfer manager start a multipart upload (it does from 16 MiB).
const failAfter = 17 << 20

func TestS3(t *testing.T) {
	srv := miniotest.Start(t)

	t.Run("Conformance", func(t *testing.T) {
		storagetest.Run(t, func(t *testing.T) storagetest.Fixture {
			proxy := faultproxy.StartHTTP(t, srv.Endpoint())
			f := newS3FixtureAt(t, srv, proxy.Addr(), nil)
			return storagetest.Fixture{
				Bucket: f.bucket,
				IncompleteUploads: func(ctx context.Context) ([]storage.Upload, error) {
					return srv.IncompleteUploads(ctx, f.name)
				},
				LoseAnswer: func(*testing.T) func() bool { return proxy.LoseNextAnswer(faultproxy.IsObjectCreation) },
			}
		})
	})

	t.Run("DriverAloneLeavesUploads", func(t *testing.T) {
		// What s3blob does on its own: the transfer manager aborts on the
		// cancelled context, which fails, and the upload stays.
		f := newS3Fixture(t, srv, nil)
		blob.KeepFailedUploads(f.bucket)
		err := f.bucket.Put(t.Context(), "failed", &brokenReader{n: failAfter, err: errBroken}, nil)
		require.ErrorIs(t, err, errBroken)
		ctx, cancel := context.WithCancel(t.Context())
		r := &cancelAfter{n: failAfter, cancel: cancel}
		require.ErrorIs(t, f.bucket.Put(ctx, "cancelled", r, nil), context.Canceled)

		var keys []string
		for _, u := range f.uploads(t) {
			keys = append(keys, u.Key)
		}
		slices.Sort(keys)
		assert.Equal(t, []string{"cancelled", "failed"}, keys)
	})

	t.Run("AbortsUploadOfFailedPut", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
			// Connections of the shared admin client of miniotest.
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"))
		f := newS3Fixture(t, srv, &blob.Options{PartSize: 5 << 20, MaxConcurrency: 2})
		err := f.bucket.Put(t.Context(), "failed", &brokenReader{n: failAfter, err: errBroken}, nil)
		require.ErrorIs(t, err, errBroken)
		ctx, cancel := context.WithCancel(t.Context())
		r := &cancelAfter{n: failAfter, cancel: cancel}
		require.ErrorIs(t, f.bucket.Put(ctx, "cancelled", r, nil), context.Canceled)
		assert.Empty(t, f.uploads(t))
		assert.Empty(t, listKeys(t, f.bucket, ""))
		f.client.Options().HTTPClient.(*http.Client).CloseIdleConnections()
	})

	t.Run("AbortsUploadWhoseIDWasLost", func(t *testing.T) {
		// A Put whose context is cancelled while CreateMultipartUpload is
		// in flight gets no upload ID back, though S3 may have created the
		// upload. Simulated here by a body that creates one for the key
		// while the Put runs, and fails before the transfer manager starts
		// its own.
		f := newS3Fixture(t, srv, nil)
		create := func(key string) string {
			out, err := f.client.CreateMultipartUpload(t.Context(), &s3.CreateMultipartUploadInput{Bucket: aws.String(f.name), Key: aws.String(key)})
			require.NoError(t, err)
			return aws.ToString(out.UploadId)
		}
		older := create("k")
		other := create("k2")
		time.Sleep(1100 * time.Millisecond) // S3 times are in seconds

		var created string
		body := io.MultiReader(
			strings.NewReader(strings.Repeat("x", 1<<20)),
			readerFunc(func([]byte) (int, error) {
				created = create("k")
				return 0, errBroken
			}),
		)
		require.ErrorIs(t, f.bucket.Put(t.Context(), "k", body, nil), errBroken)
		require.NotEmpty(t, created)

		var ids []string
		for _, u := range f.uploads(t) {
			ids = append(ids, u.ID)
		}
		assert.ElementsMatch(t, []string{older, other}, ids, "only the upload made during the put is aborted")
	})

	t.Run("UploadCleaner", func(t *testing.T) {
		f := newS3Fixture(t, srv, &blob.Options{PartSize: 5 << 20})
		blob.KeepFailedUploads(f.bucket)
		// Keys that s3blob escapes on S3: the "/" after "..", and text
		// that reads like one of its escapes.
		ks := []string{"dots/a../b", "plain/x", "u__0x41__v"}
		for _, k := range ks {
			require.ErrorIs(t, f.bucket.Put(t.Context(), k, &brokenReader{n: failAfter, err: errBroken}, nil), errBroken)
		}
		raw := map[string]bool{}
		for _, u := range f.uploads(t) {
			raw[u.Key] = true
		}
		assert.Equal(t, map[string]bool{"dots/a..__0x2f__b": true, "plain/x": true, "u__0x5f___0x41__v": true}, raw, "keys as s3blob escapes them")

		collect := func(prefix string) []storage.Upload {
			var ups []storage.Upload
			for u, err := range f.bucket.IncompleteUploads(t.Context(), prefix) {
				require.NoError(t, err)
				ups = append(ups, u)
			}
			return ups
		}
		var got []string
		for _, u := range collect("") {
			got = append(got, u.Key)
			assert.NotEmpty(t, u.ID)
			assert.WithinDuration(t, time.Now(), u.Initiated, time.Minute)
		}
		assert.ElementsMatch(t, ks, got)
		dots := collect("dots/")
		require.Len(t, dots, 1)
		assert.Equal(t, "dots/a../b", dots[0].Key)
		assert.Len(t, collect("u_"), 1)
		assert.Empty(t, collect("none/"))

		for _, u := range collect("") {
			require.NoError(t, f.bucket.AbortUpload(t.Context(), u))
			// AWS answers NoSuchUpload the second time, MinIO nothing.
			if err := f.bucket.AbortUpload(t.Context(), u); err != nil {
				require.ErrorIs(t, err, storage.ErrNotFound)
			}
		}
		assert.Empty(t, f.uploads(t))

		// Through storage.WithPrefix, which forwards to the bucket.
		p, err := storage.WithPrefix(f.bucket, "dots")
		require.NoError(t, err)
		for _, err := range p.IncompleteUploads(t.Context(), "") {
			require.NoError(t, err)
		}
	})

	t.Run("EscapedKeys", func(t *testing.T) {
		f := newS3Fixture(t, srv, nil)
		ks := []string{"dots/a../b", "u__0x41__v", "plain"}
		for _, k := range ks {
			putString(t, f.bucket, k, k)
			assert.Equal(t, k, getString(t, f.bucket, k))
		}
		want := slices.Clone(ks)
		slices.Sort(want)
		assert.Equal(t, want, listKeys(t, f.bucket, ""))
		for info, err := range f.bucket.List(t.Context(), "") {
			require.NoError(t, err)
			assert.NotEmpty(t, info.ETag, "ETag of %q", info.Key)
		}

		// "e../b" sorts before "e..0", but S3 sorts the escaped
		// "e..__0x2f__b" after it: streaming List says so, SortList sorts.
		putString(t, f.bucket, "e../b", "1")
		putString(t, f.bucket, "e..0", "2")
		var listErr error
		for _, err := range f.bucket.List(t.Context(), "e") {
			if err != nil {
				listErr = err
			}
		}
		require.ErrorContains(t, listErr, "not in ascending byte order")
		gb, err := s3blob.OpenBucket(t.Context(), f.client, f.name, nil)
		require.NoError(t, err)
		sorted := blob.New(gb, &blob.Options{SortList: true})
		assert.Equal(t, []string{"e../b", "e..0"}, listKeys(t, sorted, "e"))
	})

	t.Run("PutIfAbsent", func(t *testing.T) {
		f := newS3Fixture(t, srv, &blob.Options{PartSize: 5 << 20})
		for round := range 5 {
			key := fmt.Sprintf("race/%d", round)
			var wg sync.WaitGroup
			var wins atomic.Int32
			for i := range 6 {
				wg.Go(func() {
					err := f.bucket.PutIfAbsent(t.Context(), key, strings.NewReader(fmt.Sprint(i)), nil)
					if err == nil {
						wins.Add(1)
						return
					}
					assert.ErrorIs(t, err, storage.ErrExist)
				})
			}
			wg.Wait()
			require.EqualValues(t, 1, wins.Load(), "round %d", round)
		}
		// A multipart write is checked when it completes, and the upload is
		// aborted.
		putString(t, f.bucket, "big", "small")
		err := f.bucket.PutIfAbsent(t.Context(), "big", strings.NewReader(strings.Repeat("y", failAfter)), nil)
		require.ErrorIs(t, err, storage.ErrExist)
		assert.Equal(t, "small", getString(t, f.bucket, "big"))
		assert.Empty(t, f.uploads(t))
	})

	t.Run("Errors", func(t *testing.T) {
		f := newS3Fixture(t, srv, nil)
		ctx := t.Context()

		const wrongSecret = "wrong-secret-0123456789"
		bad := newS3Client(t, srv, srv.AccessKey(), wrongSecret)
		gb, err := s3blob.OpenBucket(ctx, bad, f.name, nil)
		require.NoError(t, err)
		denied := blob.New(gb, nil)
		errs := []error{denied.Put(ctx, "k", strings.NewReader("x"), nil)}
		_, err = denied.Stat(ctx, "k")
		errs = append(errs, err)
		_, err = denied.Get(ctx, "k")
		errs = append(errs, err)
		for _, err := range denied.List(ctx, "") {
			errs = append(errs, err)
		}
		for _, err := range errs {
			require.ErrorIs(t, err, storage.ErrPermission)
			assert.NotContains(t, err.Error(), wrongSecret)
			assert.NotContains(t, err.Error(), srv.SecretKey())
		}

		gb, err = s3blob.OpenBucket(ctx, f.client, "no-such-bucket", nil)
		require.NoError(t, err)
		missing := blob.New(gb, nil)
		require.ErrorIs(t, missing.Put(ctx, "k", strings.NewReader("x"), nil), storage.ErrBucketNotFound)
		_, err = missing.Get(ctx, "k")
		require.ErrorIs(t, err, storage.ErrBucketNotFound)
		for _, err := range missing.List(ctx, "") {
			require.ErrorIs(t, err, storage.ErrBucketNotFound)
		}
		// A HEAD answer has no body to tell the bucket from the key.
		_, err = missing.Stat(ctx, "k")
		require.ErrorIs(t, err, storage.ErrNotFound)

		require.NoError(t, f.bucket.Delete(ctx, "never-there"))
		_, err = f.bucket.Get(ctx, "never-there")
		require.ErrorIs(t, err, storage.ErrNotFound)
	})

	t.Run("As", func(t *testing.T) {
		f := newS3Fixture(t, srv, nil)
		var c *s3.Client
		require.True(t, f.bucket.As(&c))
		assert.Same(t, f.client, c)
	})

	t.Run("VisibleToOtherClients", func(t *testing.T) {
		f := newS3Fixture(t, srv, nil)
		opts := &storage.PutOptions{ContentType: "application/zstd", Metadata: map[string]string{"cluster": "prod-a"}}
		require.NoError(t, f.bucket.Put(t.Context(), "snap", strings.NewReader("data"), opts))
		info, err := srv.Client(t).StatObject(t.Context(), f.name, "snap", minio.StatObjectOptions{})
		require.NoError(t, err)
		assert.Equal(t, "application/zstd", info.ContentType)
		assert.Equal(t, "prod-a", info.UserMetadata["Cluster"])
	})
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
