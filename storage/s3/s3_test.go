package s3_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

func TestSmallObjectsUseOnePutObject(t *testing.T) {
	srv := miniotest.Start(t)
	for _, tc := range []struct {
		size      int64
		multipart bool
		parts     int
	}{
		{0, false, 0},
		{1, false, 0},
		{5*mib - 1, false, 0},
		{5 * mib, false, 0}, // exactly one part: the peeked byte shows the end
		{5*mib + 1, true, 2},
		{15 * mib, true, 3},
		{15*mib + 1, true, 4},
	} {
		t.Run(fmt.Sprint(tc.size), func(t *testing.T) {
			var log requestLog
			b, _ := newBucket(t, srv, false, func(o *s3.Options) {
				o.PartSize = 5 * mib
				o.Transport = log.transport(newBaseTransport(t))
			})
			ctx := testCtx(t)
			require.NoError(t, b.Put(ctx, "k", stream(tc.size, tc.size), nil))
			if tc.multipart {
				assert.Equal(t, 0, log.count("put"))
				assert.Equal(t, 1, log.count("initiate"))
				assert.Equal(t, tc.parts, log.count("part"))
				assert.Equal(t, 1, log.count("complete"))
			} else {
				assert.Equal(t, 1, log.count("put"))
				assert.Equal(t, 0, log.count("initiate"))
			}
			requireContent(t, b, "k", tc.size, tc.size)
		})
	}
}

// requireContent asserts key holds stream(seed, size).
func requireContent(t *testing.T, b storage.Bucket, key string, seed, size int64) {
	t.Helper()
	rc, err := b.Get(testCtx(t), key)
	require.NoError(t, err)
	defer rc.Close()
	got := sha256.New()
	n, err := io.Copy(got, rc)
	require.NoError(t, err)
	require.Equal(t, size, n)
	want := sha256.New()
	_, _ = io.Copy(want, stream(seed, size))
	require.Equal(t, want.Sum(nil), got.Sum(nil), "content of %q", key)
}

func TestPartsInFlightIsTheLimit(t *testing.T) {
	srv := miniotest.Start(t)
	for _, inFlight := range []int{1, 3} {
		t.Run(fmt.Sprint(inFlight), func(t *testing.T) {
			var log requestLog
			b, _ := newBucket(t, srv, false, func(o *s3.Options) {
				o.PartSize = 5 * mib
				o.PartsInFlight = inFlight
				o.Transport = log.transport(newBaseTransport(t))
			})
			const size = 40*mib + 3
			require.NoError(t, b.Put(testCtx(t), "k", stream(3, size), nil))
			assert.Equal(t, 9, log.count("part"))
			assert.LessOrEqual(t, log.maxParts.Load(), int64(inFlight))
			if inFlight > 1 {
				assert.Greater(t, log.maxParts.Load(), int64(1), "parts never overlapped")
			}
			requireContent(t, b, "k", 3, size)
		})
	}
}

func TestTooLargeFailsAndLeavesNothing(t *testing.T) {
	srv := miniotest.Start(t)
	b, name := newBucket(t, srv, false, func(o *s3.Options) { o.PartSize = 5 * mib })
	s3.SetMaxParts(b, 3)
	ctx := testCtx(t)

	require.NoError(t, b.Put(ctx, "fits", stream(1, 15*mib), nil), "exactly 3 full parts fit")
	requireContent(t, b, "fits", 1, 15*mib)

	err := b.Put(ctx, "too/large", stream(2, 15*mib+1), nil)
	require.ErrorIs(t, err, s3.ErrTooLarge)
	assert.Contains(t, err.Error(), "more than 3 parts (15728641 bytes read, at least 15728640 bytes fit in parts of 5242880)")
	requireAbsent(t, b, "too/large")
	requireNoUploads(t, srv, name)
}

// Adaptive parts keep the promise of MaxParts x PartSize and the budget up
// to the part that finds the stream too large.
func TestTooLargeWithAdaptiveParts(t *testing.T) {
	srv := miniotest.Start(t)
	b, name := newBucket(t, srv, false, func(o *s3.Options) { o.PartSize, o.PartsInFlight, o.AdaptiveParts = 5*mib, 2, true })
	s3.SetMaxParts(b, 3)
	var peak atomic.Int64
	s3.OnPartBufferMap(b, func(held int64) {
		for p := peak.Load(); held > p && !peak.CompareAndSwap(p, held); p = peak.Load() {
		}
	})
	ctx := testCtx(t)
	require.NoError(t, b.Put(ctx, "fits", stream(1, 15*mib), nil), "MaxParts x PartSize fits")
	requireContent(t, b, "fits", 1, 15*mib)
	err := b.Put(ctx, "too/large", stream(2, 30*mib+1), nil)
	require.ErrorIs(t, err, s3.ErrTooLarge)
	requireAbsent(t, b, "too/large")
	requireNoUploads(t, srv, name)
	assert.LessOrEqual(t, peak.Load(), int64(10*mib), "bytes of part buffers")
}

// Failures of the reader and cancellations at offsets around part
// boundaries, with two parts in flight.
func TestFailuresLeaveNoIncompleteUpload(t *testing.T) {
	srv := miniotest.Start(t)
	b, name := newBucket(t, srv, false, func(o *s3.Options) {
		o.PartSize = 5 * mib
		o.PartsInFlight = 2
	})
	offsets := []int64{0, 1, 5*mib - 1, 5 * mib, 5*mib + 1, 10 * mib, 17*mib + 7}
	for _, at := range offsets {
		t.Run(fmt.Sprintf("reader/%d", at), func(t *testing.T) {
			key := fmt.Sprintf("reader/%d", at)
			err := b.Put(testCtx(t), key, &failAfter{r: stream(at, 1<<40), n: at, err: errBoom}, nil)
			require.ErrorIs(t, err, errBoom)
			var se *storage.Error
			require.ErrorAs(t, err, &se)
			assert.Equal(t, "put", se.Op)
			assert.Equal(t, key, se.Key)
			requireAbsent(t, b, key)
			requireNoUploads(t, srv, name)
		})
		t.Run(fmt.Sprintf("cancel/%d", at), func(t *testing.T) {
			key := fmt.Sprintf("cancel/%d", at)
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			err := b.Put(ctx, key, &cancelAfter{r: stream(at, 1<<40), n: at, cancel: cancel}, nil)
			require.ErrorIs(t, err, context.Canceled)
			requireAbsent(t, b, key)
			requireNoUploads(t, srv, name)
		})
	}
	t.Run("cancel-cause", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(testCtx(t))
		cause := errors.New("backup superseded")
		err := b.Put(ctx, "cause", &cancelAfter{r: stream(1, 1<<40), n: 12 * mib, cancel: func() { cancel(cause) }}, nil)
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, cause)
		requireNoUploads(t, srv, name)
	})
	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
		defer cancel()
		slow := readerFunc(func(p []byte) (int, error) {
			time.Sleep(time.Millisecond)
			return len(p), nil
		})
		err := b.Put(ctx, "deadline", slow, nil)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		requireNoUploads(t, srv, name)
	})
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// Faults injected into the HTTP requests of a multipart upload: a part
// fails, a part is cancelled mid-request, the completion fails.
func TestRequestFaultsLeaveNoIncompleteUpload(t *testing.T) {
	srv := miniotest.Start(t)
	errNet := errors.New("injected network failure")
	tests := []struct {
		name string
		// hook answers the request instead of the server; cancel cancels
		// the Put's context.
		hook    func(req *http.Request, cancel context.CancelFunc) (*http.Response, error)
		wantErr error
	}{
		{
			name: "third part fails",
			hook: func(req *http.Request, _ context.CancelFunc) (*http.Response, error) {
				if requestKind(req) == "part" && req.URL.Query().Get("partNumber") == "3" {
					return nil, errNet
				}
				return nil, nil
			},
			wantErr: errNet,
		},
		{
			name: "first part refused",
			hook: func(req *http.Request, _ context.CancelFunc) (*http.Response, error) {
				if requestKind(req) == "part" && req.URL.Query().Get("partNumber") == "1" {
					return s3ErrorResponse(req, http.StatusForbidden, "AccessDenied", "Access Denied."), nil
				}
				return nil, nil
			},
			wantErr: storage.ErrPermission,
		},
		{
			name: "cancelled during second part",
			hook: func(req *http.Request, cancel context.CancelFunc) (*http.Response, error) {
				if requestKind(req) == "part" && req.URL.Query().Get("partNumber") == "2" {
					cancel()
					<-req.Context().Done()
					return nil, req.Context().Err()
				}
				return nil, nil
			},
			wantErr: context.Canceled,
		},
		{
			name: "completion fails",
			hook: func(req *http.Request, _ context.CancelFunc) (*http.Response, error) {
				if requestKind(req) == "complete" {
					return nil, errNet
				}
				return nil, nil
			},
			wantErr: errNet,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			var logs syncBuffer
			b, name := newBucket(t, srv, false, func(o *s3.Options) {
				o.PartSize = 5 * mib
				o.PartsInFlight = 2
				o.MaxRetries = 1
				o.Transport = &faultTransport{
					base: newBaseTransport(t),
					hook: func(req *http.Request) (*http.Response, error) { return tc.hook(req, cancel) },
				}
				o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			})
			err := b.Put(ctx, "k", stream(1, 30*mib), nil)
			require.ErrorIs(t, err, tc.wantErr)
			requireAbsent(t, b, "k")
			requireNoUploads(t, srv, name)
			assert.Contains(t, logs.String(), "multipart upload aborted")
		})
	}
}

// s3ErrorResponse forges an S3 error answer to req.
func s3ErrorResponse(req *http.Request, status int, code, msg string) *http.Response {
	body := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message></Error>`, code, msg)
	return &http.Response{
		StatusCode:    status,
		Status:        fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"application/xml"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func TestWrongCredentialsArePermissionErrorsWithoutTheSecret(t *testing.T) {
	srv := miniotest.Start(t)
	name := srv.NewBucket(t, miniotest.BucketOptions{})
	const canary = "CANARY-s3cr3t-DO-NOT-LEAK-8c1f"
	for _, tc := range []struct{ name, access string }{
		{"wrong secret", srv.AccessKey()},
		{"unknown access key", "nobody-at-all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncBuffer
			opts := srv.S3Options(name)
			opts.Credentials = s3.StaticCredentials(tc.access, canary, canary+"-token")
			opts.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			opts.MaxRetries = 1
			b, err := s3.New(opts)
			require.NoError(t, err)
			ctx := testCtx(t)

			var errs []error
			errs = append(errs,
				b.Put(ctx, "small", stream(1, 10), nil),
				b.Put(ctx, "large", stream(1, 20*mib), nil),
				b.PutIfAbsent(ctx, "small", stream(1, 10), nil),
				b.Delete(ctx, "small"),
				b.Check(ctx),
				b.SetRetention(ctx, "small", storage.Retention{Mode: storage.Governance, Until: time.Now().Add(time.Hour)}),
			)
			_, err = b.Get(ctx, "small")
			errs = append(errs, err)
			_, err = b.Stat(ctx, "small")
			errs = append(errs, err)
			_, err = b.Retention(ctx, "small")
			errs = append(errs, err)
			for _, err := range b.List(ctx, "") {
				errs = append(errs, err)
			}
			for _, err := range b.IncompleteUploads(ctx, "") {
				errs = append(errs, err)
			}
			errs = append(errs, b.AbortUpload(ctx, storage.Upload{Key: "small", ID: "x"}))
			for i, err := range errs {
				require.ErrorIs(t, err, storage.ErrPermission, "error %d: %v", i, err)
				for _, s := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
					require.NotContains(t, s, canary, "error %d", i)
				}
				var resp minio.ErrorResponse
				require.ErrorAs(t, err, &resp, "error %d keeps the S3 error", i)
			}
			require.NotContains(t, logs.String(), canary)
			for _, s := range []string{b.String(), fmt.Sprintf("%v %+v %#v %s", b, b, b, b), opts.String(),
				fmt.Sprintf("%v %+v %#v %s", opts, opts, opts, opts), fmt.Sprintf("%v %+v %#v", &opts, &opts, &opts)} {
				require.NotContains(t, s, canary)
			}
		})
	}
	requireNoUploads(t, srv, name)
}

func TestMissingBucket(t *testing.T) {
	srv := miniotest.Start(t)
	b, err := s3.New(srv.S3Options("no-such-bucket"))
	require.NoError(t, err)
	ctx := testCtx(t)
	var errs []error
	errs = append(errs,
		b.Put(ctx, "small", stream(1, 10), nil),
		b.Put(ctx, "large", stream(1, 20*mib), nil),
		b.PutIfAbsent(ctx, "small", stream(1, 10), nil),
		b.Delete(ctx, "small"),
		b.Check(ctx),
	)
	_, err = b.Get(ctx, "small")
	errs = append(errs, err)
	_, err = b.Stat(ctx, "small")
	errs = append(errs, err)
	for _, err := range b.List(ctx, "a/") {
		errs = append(errs, err)
	}
	for _, err := range b.IncompleteUploads(ctx, "") {
		errs = append(errs, err)
	}
	for i, err := range errs {
		require.ErrorIs(t, err, storage.ErrBucketNotFound, "error %d: %v", i, err)
		require.NotErrorIs(t, err, storage.ErrNotFound, "error %d", i)
	}
}

func TestCheck(t *testing.T) {
	srv := miniotest.Start(t)
	b, _ := newBucket(t, srv, false, nil)
	require.NoError(t, b.Check(testCtx(t)))
}

func TestPutIfAbsent(t *testing.T) {
	srv := miniotest.Start(t)
	b, name := newBucket(t, srv, false, func(o *s3.Options) { o.PartSize = 5 * mib })
	ctx := testCtx(t)
	for _, size := range []int64{3, 12 * mib} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			key := fmt.Sprintf("once/%d", size)
			require.NoError(t, b.PutIfAbsent(ctx, key, stream(1, size), nil))
			err := b.PutIfAbsent(ctx, key, stream(2, size), nil)
			require.ErrorIs(t, err, storage.ErrExist)
			var resp minio.ErrorResponse
			require.ErrorAs(t, err, &resp)
			assert.Equal(t, "PreconditionFailed", resp.Code)
			requireContent(t, b, key, 1, size)
			requireNoUploads(t, srv, name)
		})
	}
	// The key appears while the multipart upload runs: the store refuses
	// the completion, and the upload is aborted.
	t.Run("created meanwhile", func(t *testing.T) {
		other, err := s3.New(srv.S3Options(name))
		require.NoError(t, err)
		var once sync.Once
		var raceErr error
		r := &hookReader{r: stream(3, 20*mib), at: 6 * mib, hook: func() {
			once.Do(func() { raceErr = other.Put(ctx, "raced", stream(4, 10), nil) })
		}}
		err = b.PutIfAbsent(ctx, "raced", r, nil)
		require.NoError(t, raceErr)
		require.ErrorIs(t, err, storage.ErrExist)
		requireContent(t, b, "raced", 4, 10)
		requireNoUploads(t, srv, name)
	})
	// Plain Put still overwrites.
	require.NoError(t, b.Put(ctx, "once/3", stream(5, 4), nil))
	requireContent(t, b, "once/3", 5, 4)
}

// hookReader calls hook once at least `at` bytes were read.
type hookReader struct {
	r    io.Reader
	at   int64
	read int64
	hook func()
}

func (h *hookReader) Read(p []byte) (int, error) {
	if h.read >= h.at {
		h.hook()
	}
	n, err := h.r.Read(p)
	h.read += int64(n)
	return n, err
}

func TestObjectLock(t *testing.T) {
	srv := miniotest.Start(t)
	ctx := testCtx(t)
	until := time.Now().Add(time.Hour).Truncate(time.Second).UTC()

	t.Run("retention round trip", func(t *testing.T) {
		b, _ := newBucket(t, srv, true, nil)
		require.NoError(t, b.Put(ctx, "k", stream(1, 10), nil))
		r, err := b.Retention(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, storage.Retention{}, r, "no lock yet")

		require.NoError(t, b.SetRetention(ctx, "k", storage.Retention{Mode: storage.Governance, Until: until}))
		r, err = b.Retention(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, storage.Governance, r.Mode)
		assert.True(t, until.Equal(r.Until), "until %v, want %v", r.Until, until)
		assert.True(t, r.Active(time.Now()))

		_, err = b.Retention(ctx, "missing")
		require.ErrorIs(t, err, storage.ErrNotFound)
		err = b.SetRetention(ctx, "k", storage.Retention{Mode: "FOREVER", Until: until})
		require.Error(t, err)
	})

	t.Run("compliance cannot be shortened", func(t *testing.T) {
		b, _ := newBucket(t, srv, true, nil)
		require.NoError(t, b.Put(ctx, "k", stream(1, 10), nil))
		require.NoError(t, b.SetRetention(ctx, "k", storage.Retention{Mode: storage.Compliance, Until: until}))
		err := b.SetRetention(ctx, "k", storage.Retention{Mode: storage.Compliance, Until: until.Add(-time.Minute)})
		require.ErrorIs(t, err, storage.ErrLocked)
		err = b.SetRetention(ctx, "k", storage.Retention{Mode: storage.Governance, Until: until})
		require.ErrorIs(t, err, storage.ErrLocked)
		require.NoError(t, b.SetRetention(ctx, "k", storage.Retention{Mode: storage.Compliance, Until: until.Add(time.Hour)}),
			"extending is allowed")
	})

	// A plain DELETE of a locked object would succeed on MinIO (as on S3):
	// it would add a delete marker and leave the locked version, hidden.
	// Delete knows the bucket has object lock and meets the lock instead.
	t.Run("delete on an object-lock bucket meets the lock", func(t *testing.T) {
		b, name := newBucket(t, srv, true, nil)
		require.NoError(t, b.Put(ctx, "k", stream(1, 10), nil))
		require.NoError(t, b.SetRetention(ctx, "k", storage.Retention{Mode: storage.Governance, Until: until}))
		require.ErrorIs(t, b.Delete(ctx, "k"), storage.ErrLocked)
		requireContent(t, b, "k", 1, 10)
		versions := listVersions(t, b.Client(), name, "k")
		require.Len(t, versions, 1, "no delete marker")
		ret, err := b.Retention(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, storage.Governance, ret.Mode)
	})

	t.Run("delete of all versions is refused while locked", func(t *testing.T) {
		b, name := newBucket(t, srv, true, func(o *s3.Options) { o.DeleteAllVersions = true })
		require.NoError(t, b.Put(ctx, "k", stream(1, 10), nil))
		require.NoError(t, b.SetRetention(ctx, "k", storage.Retention{Mode: storage.Governance, Until: until}))
		err := b.Delete(ctx, "k")
		require.ErrorIs(t, err, storage.ErrLocked)
		var resp minio.ErrorResponse
		require.ErrorAs(t, err, &resp)
		requireContent(t, b, "k", 1, 10)
		require.Len(t, listVersions(t, b.Client(), name, "k"), 1, "no delete marker was added")
		r, err := b.Retention(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, storage.Governance, r.Mode)
	})

	t.Run("delete of all versions frees unlocked versions", func(t *testing.T) {
		b, name := newBucket(t, srv, true, func(o *s3.Options) { o.DeleteAllVersions = true })
		require.NoError(t, b.Put(ctx, "k", stream(1, 10), nil))
		require.NoError(t, b.Put(ctx, "k", stream(2, 10), nil))
		require.NoError(t, b.Put(ctx, "k2", stream(3, 10), nil), "a key sharing the prefix")
		require.Len(t, listVersions(t, b.Client(), name, "k"), 2)
		require.NoError(t, b.Delete(ctx, "k"))
		requireAbsent(t, b, "k")
		assert.Empty(t, listVersions(t, b.Client(), name, "k"))
		requireContent(t, b, "k2", 3, 10)
		require.NoError(t, b.Delete(ctx, "k"), "deleting a missing key")
	})

	t.Run("delete of all versions on an unversioned bucket", func(t *testing.T) {
		b, _ := newBucket(t, srv, false, func(o *s3.Options) { o.DeleteAllVersions = true })
		require.NoError(t, b.Put(ctx, "k", stream(1, 10), nil))
		require.NoError(t, b.Delete(ctx, "k"))
		requireAbsent(t, b, "k")
	})

	t.Run("bucket without object lock", func(t *testing.T) {
		b, _ := newBucket(t, srv, false, nil)
		require.NoError(t, b.Put(ctx, "k", stream(1, 10), nil))
		err := b.SetRetention(ctx, "k", storage.Retention{Mode: storage.Governance, Until: until})
		require.ErrorIs(t, err, storage.ErrUnsupported)
		_, err = b.Retention(ctx, "k")
		require.ErrorIs(t, err, storage.ErrUnsupported)
	})

	t.Run("legal hold", func(t *testing.T) {
		b, name := newBucket(t, srv, true, nil)
		require.NoError(t, b.Put(ctx, "k", stream(1, 10), nil))
		held, err := b.LegalHold(ctx, "k")
		require.NoError(t, err)
		assert.False(t, held, "no hold yet")
		on := minio.LegalHoldEnabled
		require.NoError(t, b.Client().PutObjectLegalHold(ctx, name, "k", minio.PutObjectLegalHoldOptions{Status: &on}))
		held, err = b.LegalHold(ctx, "k")
		require.NoError(t, err)
		assert.True(t, held)
		require.ErrorIs(t, b.Delete(ctx, "k"), storage.ErrLocked)
		_, err = b.LegalHold(ctx, "missing")
		require.ErrorIs(t, err, storage.ErrNotFound)

		plain, _ := newBucket(t, srv, false, nil)
		require.NoError(t, plain.Put(ctx, "k", stream(1, 10), nil))
		_, err = plain.LegalHold(ctx, "k")
		require.ErrorIs(t, err, storage.ErrUnsupported)
	})

	t.Run("multipart write to a locked bucket", func(t *testing.T) {
		b, _ := newBucket(t, srv, true, func(o *s3.Options) { o.PartSize = 5 * mib })
		require.NoError(t, b.Put(ctx, "big", stream(1, 11*mib), nil))
		requireContent(t, b, "big", 1, 11*mib)
	})
}

// listVersions lists the versions of key, newest first.
func listVersions(t *testing.T, c *minio.Client, bucket, key string) []minio.ObjectInfo {
	t.Helper()
	var out []minio.ObjectInfo
	for v := range c.ListObjectsIter(testCtx(t), bucket, minio.ListObjectsOptions{Prefix: key, WithVersions: true, Recursive: true}) {
		require.NoError(t, v.Err)
		if v.Key == key {
			out = append(out, v)
		}
	}
	return out
}

func TestUploadCleaner(t *testing.T) {
	srv := miniotest.Start(t)
	b, name := newBucket(t, srv, false, nil)
	ctx := testCtx(t)
	core := minio.Core{Client: b.Client()}
	ids := map[string]string{}
	for _, key := range []string{"a/1", "a/2", "ab/3", "b/4"} {
		id, err := core.NewMultipartUpload(ctx, name, key, minio.PutObjectOptions{})
		require.NoError(t, err)
		ids[key] = id
	}
	collect := func(prefix string) []storage.Upload {
		var out []storage.Upload
		for u, err := range b.IncompleteUploads(ctx, prefix) {
			require.NoError(t, err)
			out = append(out, u)
		}
		return out
	}
	assert.Len(t, collect(""), 4)
	under := collect("a/")
	require.Len(t, under, 2, "MinIO needs the whole-bucket listing for a partial prefix")
	for _, u := range under {
		assert.True(t, strings.HasPrefix(u.Key, "a/"))
		assert.Equal(t, ids[u.Key], u.ID)
		assert.WithinDuration(t, time.Now(), u.Initiated, time.Minute)
		require.NoError(t, b.AbortUpload(ctx, u))
		require.NoError(t, b.AbortUpload(ctx, u), "aborting twice")
	}
	left, err := srv.IncompleteUploads(ctx, name)
	require.NoError(t, err)
	assert.Len(t, left, 2)

	for _, err := range b.IncompleteUploads(ctx, "../x") {
		require.ErrorIs(t, err, storage.ErrInvalidKey)
	}
	require.Error(t, b.AbortUpload(ctx, storage.Upload{Key: "a/1"}), "empty id")
	require.ErrorIs(t, b.AbortUpload(ctx, storage.Upload{Key: "/a", ID: "x"}), storage.ErrInvalidKey)

	// Through a prefix, as retention uses it.
	p, err := storage.WithPrefix(b, "b")
	require.NoError(t, err)
	var seen []storage.Upload
	for u, err := range p.IncompleteUploads(ctx, "") {
		require.NoError(t, err)
		seen = append(seen, u)
	}
	require.Len(t, seen, 1)
	assert.Equal(t, "4", seen[0].Key)
	require.NoError(t, p.AbortUpload(ctx, seen[0]))
	left, err = srv.IncompleteUploads(ctx, name)
	require.NoError(t, err)
	assert.Len(t, left, 1)
}

func TestServerSideEncryption(t *testing.T) {
	srv := miniotest.Start(t)
	for _, tc := range []struct {
		sse        s3.SSE
		wantHeader string
	}{
		{s3.SSE{Mode: s3.SSES3}, "AES256"},
		{s3.SSE{Mode: s3.SSEKMS, KMSKeyID: miniotest.KMSKeyName}, "aws:kms"},
	} {
		t.Run(string(tc.sse.Mode), func(t *testing.T) {
			b, name := newBucket(t, srv, false, func(o *s3.Options) {
				o.Encryption = tc.sse
				o.PartSize = 5 * mib
			})
			ctx := testCtx(t)
			for _, size := range []int64{100, 7 * mib} {
				key := fmt.Sprint(size)
				require.NoError(t, b.Put(ctx, key, stream(size, size), nil))
				requireContent(t, b, key, size, size)
				info, err := b.Client().StatObject(ctx, name, key, minio.StatObjectOptions{})
				require.NoError(t, err)
				assert.Equal(t, tc.wantHeader, info.Metadata.Get("X-Amz-Server-Side-Encryption"), "size %d", size)
			}
		})
	}
	t.Run("unknown kms key", func(t *testing.T) {
		b, name := newBucket(t, srv, false, func(o *s3.Options) {
			o.Encryption = s3.SSE{Mode: s3.SSEKMS, KMSKeyID: "no-such-key"}
			o.PartSize = 5 * mib
		})
		require.Error(t, b.Put(testCtx(t), "k", stream(1, 100), nil))
		require.Error(t, b.Put(testCtx(t), "k", stream(1, 7*mib), nil))
		requireNoUploads(t, srv, name)
	})
}

func TestMetadataAndContentType(t *testing.T) {
	srv := miniotest.Start(t)
	b, name := newBucket(t, srv, false, func(o *s3.Options) { o.PartSize = 5 * mib })
	ctx := testCtx(t)
	opts := &storage.PutOptions{ContentType: "application/zstd", Metadata: map[string]string{"cluster": "prod-a", "backup-id": "2026.1"}}
	for _, size := range []int64{10, 6 * mib} {
		key := fmt.Sprint(size)
		require.NoError(t, b.Put(ctx, key, stream(1, size), opts))
		info, err := b.Client().StatObject(ctx, name, key, minio.StatObjectOptions{})
		require.NoError(t, err)
		assert.Equal(t, "application/zstd", info.ContentType)
		assert.Equal(t, "prod-a", info.UserMetadata["Cluster"])
		assert.Equal(t, "2026.1", info.UserMetadata["Backup-Id"])
	}
	for _, md := range []map[string]string{
		{"Upper": "x"},
		{"content-type": "\x01"},
		{"": "x"},
		{"ok": "line\nbreak"},
		{"ok": "ünïcode"},
	} {
		err := b.Put(ctx, "bad-metadata", stream(1, 10), &storage.PutOptions{Metadata: md})
		require.Error(t, err, "%q", md)
	}
	requireAbsent(t, b, "bad-metadata")
}

func TestListEndsWithErrorWhenContextEnds(t *testing.T) {
	srv := miniotest.Start(t)
	b, _ := newBucket(t, srv, false, nil)
	ctx := testCtx(t)
	for i := range 3 {
		require.NoError(t, b.Put(ctx, fmt.Sprintf("k/%d", i), stream(1, 1), nil))
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	var errs []error
	for _, err := range b.List(cctx, "k/") {
		errs = append(errs, err)
	}
	require.Len(t, errs, 1)
	require.ErrorIs(t, errs[0], context.Canceled)

	cctx, cancel = context.WithCancel(ctx)
	defer cancel()
	var n int
	var last error
	for _, err := range b.List(cctx, "k/") {
		if err != nil {
			last = err
			break
		}
		n++
		cancel()
	}
	assert.Equal(t, 1, n)
	require.ErrorIs(t, last, context.Canceled, "a listing cut short must not look complete")
}

func TestGetReadsAfterDelete(t *testing.T) {
	srv := miniotest.Start(t)
	b, _ := newBucket(t, srv, false, nil)
	ctx := testCtx(t)
	require.NoError(t, b.Put(ctx, "k", stream(1, 100), nil))
	rc, err := b.Get(ctx, "k")
	require.NoError(t, err)
	defer rc.Close()
	_, err = b.Get(ctx, "missing")
	var se *storage.Error
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "get", se.Op)
	assert.Equal(t, "missing", se.Key)
	var resp minio.ErrorResponse
	require.ErrorAs(t, err, &resp)
	assert.Equal(t, "NoSuchKey", resp.Code)
}

// A destination that goes away and comes back: requests fail while the
// server is down, and the same Bucket works again afterwards.
func TestServerUnavailableThenBack(t *testing.T) {
	srv := miniotest.Start(t)
	b, name := newBucket(t, srv, false, func(o *s3.Options) {
		o.MaxRetries = 1
		o.PartSize = 5 * mib
	})
	ctx := testCtx(t)
	require.NoError(t, b.Put(ctx, "before", stream(1, 10), nil))

	srv.Stop(t)
	require.Error(t, b.Put(ctx, "during", stream(2, 10), nil))
	require.Error(t, b.Put(ctx, "during", stream(2, 12*mib), nil))
	_, err := b.Stat(ctx, "before")
	require.Error(t, err)
	require.NotErrorIs(t, err, storage.ErrNotFound, "an outage is not a missing key")
	require.Error(t, b.Check(ctx))

	srv.Restart(t)
	require.NoError(t, b.Check(ctx))
	requireContent(t, b, "before", 1, 10)
	requireAbsent(t, b, "during")
	require.NoError(t, b.Put(ctx, "after", stream(3, 12*mib), nil))
	requireContent(t, b, "after", 3, 12*mib)
	requireNoUploads(t, srv, name)
}
