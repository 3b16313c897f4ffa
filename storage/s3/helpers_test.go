package s3_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

const mib = 1 << 20

// newBucket returns a Bucket on a fresh bucket of srv; mod, if not nil,
// adjusts the options first.
func newBucket(t testing.TB, srv *miniotest.Server, lock bool, mod func(*s3.Options)) (*s3.Bucket, string) {
	t.Helper()
	name := srv.NewBucket(t, miniotest.BucketOptions{ObjectLocking: lock})
	opts := srv.S3Options(name)
	if mod != nil {
		mod(&opts)
	}
	b, err := s3.New(opts)
	require.NoError(t, err)
	return b, name
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// stream returns n pseudo-random bytes whose length the reader hides.
func stream(seed, n int64) io.Reader {
	return onlyReader{io.LimitReader(randReader(seed), n)}
}

func randReader(seed int64) io.Reader {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return rand.NewChaCha8(s)
}

type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// failAfter yields n bytes of r, then fails with err.
type failAfter struct {
	r   io.Reader
	n   int64
	err error
}

func (f *failAfter) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, f.err
	}
	if int64(len(p)) > f.n {
		p = p[:f.n]
	}
	n, err := f.r.Read(p)
	f.n -= int64(n)
	return n, err
}

// cancelAfter calls cancel once n bytes were read, and keeps yielding.
type cancelAfter struct {
	r      io.Reader
	n      int64
	cancel context.CancelFunc
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	if c.n <= 0 {
		c.cancel()
	} else if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	n, err := c.r.Read(p)
	c.n -= int64(n)
	return n, err
}

// faultTransport passes requests to base unless hook answers them.
type faultTransport struct {
	base http.RoundTripper
	hook func(*http.Request) (*http.Response, error) // nil, nil: pass
}

func (f *faultTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if f.hook != nil {
		resp, err := f.hook(req)
		if resp != nil || err != nil {
			if req.Body != nil {
				req.Body.Close()
			}
			return resp, err
		}
	}
	return f.base.RoundTrip(req)
}

func newBaseTransport(t testing.TB) *http.Transport {
	tr, err := minio.DefaultTransport(false)
	require.NoError(t, err)
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// requestKind names an S3 request by method and query.
func requestKind(req *http.Request) string {
	q := req.URL.Query()
	switch {
	case req.Method == http.MethodPost && q.Has("uploads"):
		return "initiate"
	case req.Method == http.MethodPut && q.Has("partNumber"):
		return "part"
	case req.Method == http.MethodPost && q.Has("uploadId"):
		return "complete"
	case req.Method == http.MethodDelete && q.Has("uploadId"):
		return "abort"
	case req.Method == http.MethodPut && !q.Has("retention") && strings.Count(strings.Trim(req.URL.Path, "/"), "/") >= 1:
		return "put"
	}
	return req.Method + " " + req.URL.RawQuery
}

// requestLog counts requests by kind and the most part requests in flight.
type requestLog struct {
	mu       sync.Mutex
	counts   map[string]int
	inFlight atomic.Int64
	maxParts atomic.Int64
}

func (l *requestLog) transport(base http.RoundTripper) http.RoundTripper {
	l.counts = map[string]int{}
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		kind := requestKind(req)
		l.mu.Lock()
		l.counts[kind]++
		l.mu.Unlock()
		if kind == "part" {
			n := l.inFlight.Add(1)
			defer l.inFlight.Add(-1)
			for {
				m := l.maxParts.Load()
				if n <= m || l.maxParts.CompareAndSwap(m, n) {
					break
				}
			}
			// Hold parts a moment so that overlapping ones show.
			time.Sleep(100 * time.Millisecond)
		}
		return base.RoundTrip(req)
	})
}

func (l *requestLog) count(kind string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[kind]
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// requireNoUploads asserts that bucket holds no incomplete upload.
func requireNoUploads(t *testing.T, srv *miniotest.Server, bucket string) {
	t.Helper()
	uploads, err := srv.IncompleteUploads(testCtx(t), bucket)
	require.NoError(t, err)
	require.Empty(t, uploads, "incomplete multipart uploads left behind")
}

// requireAbsent asserts that key does not exist.
func requireAbsent(t *testing.T, b storage.Bucket, key string) {
	t.Helper()
	_, err := b.Stat(testCtx(t), key)
	require.ErrorIs(t, err, storage.ErrNotFound)
}

var errBoom = errors.New("boom")
