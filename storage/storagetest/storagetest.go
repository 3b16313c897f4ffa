// Package storagetest is the conformance suite every storage.Bucket of this
// module passes: each backend, and each wrapper around a backend.
//
// A backend's test calls Run with a function that makes a fresh, empty
// bucket for every subtest:
//
//	func TestConformance(t *testing.T) {
//		storagetest.Run(t, func(t *testing.T) storagetest.Fixture {
//			return storagetest.Fixture{Bucket: newEmptyBucket(t)}
//		})
//	}
//
// The suite holds a backend only to what every object store can keep: for
// example deleting a missing key is not an error, because S3 says so, and
// no key is also the folder of another key ("a/b" beside "a/b/c"), because
// a store on a file system cannot hold both.
package storagetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/storage"
)

// Fixture is one fresh, empty bucket under test.
type Fixture struct {
	// Bucket is the bucket under test. It must be empty.
	Bucket storage.Bucket

	// IncompleteUploads lists the unfinished multipart uploads in the
	// fixture's bucket, whatever their key. When it is nil and Bucket is a
	// storage.UploadCleaner, the suite asks Bucket itself. The suite asserts
	// that failed and cancelled Puts leave none behind.
	IncompleteUploads func(ctx context.Context) ([]storage.Upload, error)

	// NoMetadata declares a bucket that does not keep user metadata (a
	// fileblob bucket opened with metadata=skip). Otherwise the suite
	// asserts that Stat returns what Put stored.
	NoMetadata bool

	// LoseAnswer, when set, arranges that the store's answer to the next
	// request that makes an object visible (a single-request upload, or the
	// request completing a multipart one) is lost on its way back: the
	// store keeps the object, the client sees a broken connection and
	// retries. It returns a function reporting whether the fault fired.
	// The suite asserts that PutIfAbsent still succeeds for the writer
	// whose object it is, small or multipart, and that Stat hides the
	// put's token. Buckets reached without a network leave it nil.
	LoseAnswer func(t *testing.T) (fired func() bool)
}

// Sizes of the round trips. Large spans several parts of any multipart
// uploader configured with parts of 5 to 16 MiB.
const (
	MiB   = 1 << 20
	Large = 64 * MiB
)

// Run runs the conformance suite as subtests of t. newFixture is called once
// per subtest and must return a fresh, empty bucket.
func Run(t *testing.T, newFixture func(t *testing.T) Fixture) {
	tests := []struct {
		name string
		fn   func(t *testing.T, f Fixture)
	}{
		{"RoundTrip", testRoundTrip},
		{"Overwrite", testOverwrite},
		{"Metadata", testPutOptions},
		{"UnusualKeys", testUnusualKeys},
		{"InvalidKeys", testInvalidKeys},
		{"Missing", testMissing},
		{"Delete", testDelete},
		{"ListOrder", testListOrder},
		{"ListPrefixIsolation", testListPrefixIsolation},
		{"ListPastOneThousand", testListPastOneThousand},
		{"ListStopEarly", testListStopEarly},
		{"FailedPutLeavesNothing", testFailedPut},
		{"CancelledPutLeavesNothing", testCancelledPut},
		{"FailedOverwriteKeepsOld", testFailedOverwrite},
		{"ConcurrentPuts", testConcurrentPuts},
		{"GetPartialRead", testGetPartialRead},
		{"PutIfAbsent", testPutIfAbsent},
		{"ExclusiveRace", testExclusiveRace},
		{"PutIfAbsentLostAnswer", testPutIfAbsentLostAnswer},
		{"ListDuringWrites", testListDuringWrites},
		{"ConcurrentDeletes", testConcurrentDeletes},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			require.NotNil(t, f.Bucket, "fixture has no bucket")
			tc.fn(t, f)
		})
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// data returns a deterministic, incompressible stream of n bytes whose
// length is hidden from the reader's consumer.
func data(seed uint64, n int64) io.Reader {
	return unknownLength{io.LimitReader(newRand(seed), n)}
}

// digest returns the sha256 of data(seed, n) without holding it.
func digest(seed uint64, n int64) [32]byte {
	h := sha256.New()
	_, _ = io.Copy(h, io.LimitReader(newRand(seed), n))
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// unknownLength hides every method but Read, so a backend cannot learn the
// size through io.Seeker, Len() or WriterTo.
type unknownLength struct{ r io.Reader }

func (u unknownLength) Read(p []byte) (int, error) { return u.r.Read(p) }

type randReader struct{ src *rand.ChaCha8 }

func newRand(seed uint64) io.Reader {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return randReader{rand.NewChaCha8(s)}
}

func (r randReader) Read(p []byte) (int, error) { return r.src.Read(p) }

func put(t *testing.T, b storage.Bucket, key string, body []byte) {
	t.Helper()
	require.NoError(t, b.Put(ctxFor(t), key, unknownLength{bytes.NewReader(body)}, nil), "put %q", key)
}

func get(t *testing.T, b storage.Bucket, key string) []byte {
	t.Helper()
	rc, err := b.Get(ctxFor(t), key)
	require.NoError(t, err, "get %q", key)
	defer rc.Close()
	got, err := io.ReadAll(rc)
	require.NoError(t, err, "read %q", key)
	return got
}

func list(t *testing.T, b storage.Bucket, prefix string) []storage.ObjectInfo {
	t.Helper()
	var out []storage.ObjectInfo
	for info, err := range b.List(ctxFor(t), prefix) {
		require.NoError(t, err, "list %q", prefix)
		out = append(out, info)
	}
	return out
}

func keys(infos []storage.ObjectInfo) []string {
	out := make([]string, len(infos))
	for i, info := range infos {
		out[i] = info.Key
	}
	return out
}

func requireNotFound(t *testing.T, b storage.Bucket, key string) {
	t.Helper()
	_, err := b.Stat(ctxFor(t), key)
	require.ErrorIs(t, err, storage.ErrNotFound, "stat %q", key)
	rc, err := b.Get(ctxFor(t), key)
	if err == nil {
		rc.Close()
	}
	require.ErrorIs(t, err, storage.ErrNotFound, "get %q", key)
}

func requireNoIncompleteUploads(t *testing.T, f Fixture) {
	t.Helper()
	ctx := ctxFor(t)
	lister := f.IncompleteUploads
	if lister == nil {
		uc, ok := f.Bucket.(storage.UploadCleaner)
		if !ok {
			return
		}
		lister = func(ctx context.Context) ([]storage.Upload, error) {
			var out []storage.Upload
			for u, err := range uc.IncompleteUploads(ctx, "") {
				if errors.Is(err, storage.ErrUnsupported) {
					return nil, nil // a store without multipart uploads
				}
				if err != nil {
					return nil, err
				}
				out = append(out, u)
			}
			return out, nil
		}
	}
	uploads, err := lister(ctx)
	require.NoError(t, err, "list incomplete uploads")
	require.Empty(t, uploads, "incomplete multipart uploads left behind")
}

func testRoundTrip(t *testing.T, f Fixture) {
	for i, size := range []int64{0, 1, 5*MiB + 1, Large} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			ctx := ctxFor(t)
			prefix := fmt.Sprintf("round/%d/", size)
			key := prefix + "object"
			seed := uint64(i + 1)
			require.NoError(t, f.Bucket.Put(ctx, key, data(seed, size), nil))

			info, err := f.Bucket.Stat(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, key, info.Key)
			assert.Equal(t, size, info.Size)
			assert.False(t, info.ModTime.IsZero(), "ModTime is zero")

			rc, err := f.Bucket.Get(ctx, key)
			require.NoError(t, err)
			h := sha256.New()
			n, err := io.Copy(h, rc)
			require.NoError(t, err)
			require.NoError(t, rc.Close())
			require.Equal(t, size, n, "bytes read back")
			want := digest(seed, size)
			require.Equal(t, want[:], h.Sum(nil), "content differs")

			listed := list(t, f.Bucket, prefix)
			require.Equal(t, []string{key}, keys(listed))
			assert.Equal(t, size, listed[0].Size)
		})
	}
}

func testOverwrite(t *testing.T, f Fixture) {
	put(t, f.Bucket, "k", []byte("first version"))
	put(t, f.Bucket, "k", []byte("second"))
	require.Equal(t, "second", string(get(t, f.Bucket, "k")))
	info, err := f.Bucket.Stat(ctxFor(t), "k")
	require.NoError(t, err)
	require.EqualValues(t, len("second"), info.Size)
	require.Len(t, list(t, f.Bucket, ""), 1)
}

func testPutOptions(t *testing.T, f Fixture) {
	opts := &storage.PutOptions{ContentType: "application/json", Metadata: map[string]string{"cluster": "prod-a"}}
	require.NoError(t, f.Bucket.Put(ctxFor(t), "with/options", bytes.NewReader([]byte(`{}`)), opts))
	require.Equal(t, `{}`, string(get(t, f.Bucket, "with/options")))
	info, err := f.Bucket.Stat(ctxFor(t), "with/options")
	require.NoError(t, err)
	if !f.NoMetadata {
		require.Equal(t, "prod-a", info.Metadata["cluster"], "Stat returns the metadata Put stored")
	}
	for info, err := range f.Bucket.List(ctxFor(t), "with/") {
		require.NoError(t, err)
		require.Nil(t, info.Metadata, "List leaves Metadata nil")
	}
}

func testUnusualKeys(t *testing.T, f Fixture) {
	ks := []string{
		"with space/and more spaces.db",
		"unicode/über-ключ-日本語.db",
		"symbols/a+b=c&d;e,f@g!h'i(j)~k$l",
		"percent/%2F%00%zz",
		"dots/a..b/.hidden/x.",
		"deep/" + string(bytes.Repeat([]byte("d/"), 40)) + "leaf",
	}
	for i, k := range ks {
		put(t, f.Bucket, k, []byte(fmt.Sprintf("body %d", i)))
	}
	for i, k := range ks {
		require.Equal(t, fmt.Sprintf("body %d", i), string(get(t, f.Bucket, k)), "key %q", k)
		info, err := f.Bucket.Stat(ctxFor(t), k)
		require.NoError(t, err, "stat %q", k)
		require.Equal(t, k, info.Key)
	}
	want := slices.Clone(ks)
	sort.Strings(want)
	require.Equal(t, want, keys(list(t, f.Bucket, "")))
	require.Equal(t, []string{ks[1]}, keys(list(t, f.Bucket, "unicode/über")))
}

func testInvalidKeys(t *testing.T, f Fixture) {
	ctx := ctxFor(t)
	for _, k := range []string{"", "/abs", "trailing/", "a//b", "../escape", "a/../b", "a/./b", ".", "nul\x00byte", "ctl\nline", "bad\xffutf8"} {
		err := f.Bucket.Put(ctx, k, bytes.NewReader([]byte("x")), nil)
		require.ErrorIs(t, err, storage.ErrInvalidKey, "put %q", k)
		_, err = f.Bucket.Get(ctx, k)
		require.ErrorIs(t, err, storage.ErrInvalidKey, "get %q", k)
		_, err = f.Bucket.Stat(ctx, k)
		require.ErrorIs(t, err, storage.ErrInvalidKey, "stat %q", k)
		require.ErrorIs(t, f.Bucket.Delete(ctx, k), storage.ErrInvalidKey, "delete %q", k)
	}
	for _, p := range []string{"/abs", "a//", "../", "x/../"} {
		var gotErr error
		for _, err := range f.Bucket.List(ctx, p) {
			gotErr = err
		}
		require.ErrorIs(t, gotErr, storage.ErrInvalidKey, "list %q", p)
	}
	require.Empty(t, list(t, f.Bucket, ""), "an invalid key was written")
}

func testMissing(t *testing.T, f Fixture) {
	requireNotFound(t, f.Bucket, "no/such/key")
	require.NoError(t, f.Bucket.Delete(ctxFor(t), "no/such/key"), "delete of a missing key")
	require.Empty(t, list(t, f.Bucket, "no/"))
	require.Empty(t, list(t, f.Bucket, ""))
}

func testDelete(t *testing.T, f Fixture) {
	put(t, f.Bucket, "a/1", []byte("one"))
	put(t, f.Bucket, "a/2", []byte("two"))
	require.NoError(t, f.Bucket.Delete(ctxFor(t), "a/1"))
	requireNotFound(t, f.Bucket, "a/1")
	require.Equal(t, []string{"a/2"}, keys(list(t, f.Bucket, "")))
	require.NoError(t, f.Bucket.Delete(ctxFor(t), "a/1"), "second delete")
}

func testListOrder(t *testing.T, f Fixture) {
	ks := []string{"b", "a/z", "a/b/c", "a-b", "a.b", "A", "a0", "a/a", "ab", "z~", "z_"}
	for _, k := range ks {
		put(t, f.Bucket, k, []byte(k))
	}
	want := slices.Clone(ks)
	sort.Strings(want) // byte order, as S3 lists
	got := list(t, f.Bucket, "")
	require.Equal(t, want, keys(got))
	for _, info := range got {
		require.EqualValues(t, len(info.Key), info.Size, "size of %q", info.Key)
	}
}

func testListPrefixIsolation(t *testing.T, f Fixture) {
	for _, k := range []string{"a/b/1", "a/b/c/2", "a/bc/3", "a/b.x", "a/bd", "ab/4", "a/b-x/5"} {
		put(t, f.Bucket, k, []byte(k))
	}
	require.Equal(t, []string{"a/b/1", "a/b/c/2"}, keys(list(t, f.Bucket, "a/b/")))
	require.Equal(t, []string{"a/b/c/2"}, keys(list(t, f.Bucket, "a/b/c/")))
	require.Equal(t, []string{"a/bc/3"}, keys(list(t, f.Bucket, "a/bc/")))
	require.Equal(t, []string{"a/b-x/5", "a/b.x", "a/b/1", "a/b/c/2", "a/bc/3", "a/bd"}, keys(list(t, f.Bucket, "a/b")))
	require.Empty(t, list(t, f.Bucket, "a/b/z"))
}

func putMany(t *testing.T, b storage.Bucket, ks []string) {
	t.Helper()
	ctx := ctxFor(t)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	work := make(chan string)
	for range 16 {
		wg.Go(func() {
			for k := range work {
				if err := b.Put(ctx, k, bytes.NewReader([]byte(k)), nil); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, k := range ks {
		work <- k
	}
	close(work)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
}

func testListPastOneThousand(t *testing.T, f Fixture) {
	const n = 1234
	ks := make([]string, n)
	for i := range ks {
		// Not zero-padded, so byte order differs from numeric order.
		ks[i] = fmt.Sprintf("many/%d", i)
	}
	putMany(t, f.Bucket, ks)
	put(t, f.Bucket, "many-not/0", []byte("outside"))
	want := slices.Clone(ks)
	sort.Strings(want)
	require.Equal(t, want, keys(list(t, f.Bucket, "many/")))
}

func testListStopEarly(t *testing.T, f Fixture) {
	ks := make([]string, 30)
	for i := range ks {
		ks[i] = fmt.Sprintf("stop/%02d", i)
	}
	putMany(t, f.Bucket, ks)
	var got []string
	for info, err := range f.Bucket.List(ctxFor(t), "stop/") {
		require.NoError(t, err)
		got = append(got, info.Key)
		if len(got) == 3 {
			break
		}
	}
	require.Equal(t, ks[:3], got)
	// The bucket is still usable after an abandoned listing.
	require.Len(t, list(t, f.Bucket, "stop/"), 30)
}

var errReader = errors.New("reader broke")

// failingReader yields n bytes of data and then fails.
type failingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (fr *failingReader) Read(p []byte) (int, error) {
	if fr.n <= 0 {
		return 0, fr.err
	}
	if int64(len(p)) > fr.n {
		p = p[:fr.n]
	}
	n, err := fr.r.Read(p)
	fr.n -= int64(n)
	return n, err
}

// failAt are the offsets at which the failure tests break a stream: at once,
// inside a first part, and after several parts of any common part size.
var failAt = []int64{0, 5*MiB + 1, 40 * MiB}

func testFailedPut(t *testing.T, f Fixture) {
	for _, at := range failAt {
		t.Run(fmt.Sprint(at), func(t *testing.T) {
			key := fmt.Sprintf("failed/%d", at)
			r := &failingReader{r: newRand(uint64(at)), n: at, err: errReader}
			err := f.Bucket.Put(ctxFor(t), key, r, nil)
			require.Error(t, err)
			require.ErrorIs(t, err, errReader, "the reader's error is not reachable")
			requireNotFound(t, f.Bucket, key)
			require.Empty(t, list(t, f.Bucket, ""), "a failed put left objects")
			requireNoIncompleteUploads(t, f)
		})
	}
}

// cancellingReader cancels its context after n bytes and then keeps going,
// as a producer that has not noticed yet would.
type cancellingReader struct {
	r      io.Reader
	n      int64
	cancel context.CancelFunc
}

func (cr *cancellingReader) Read(p []byte) (int, error) {
	if cr.n <= 0 {
		cr.cancel()
	} else if int64(len(p)) > cr.n {
		p = p[:cr.n]
	}
	n, err := cr.r.Read(p)
	cr.n -= int64(n)
	return n, err
}

func testCancelledPut(t *testing.T, f Fixture) {
	for _, at := range failAt {
		t.Run(fmt.Sprint(at), func(t *testing.T) {
			key := fmt.Sprintf("cancelled/%d", at)
			ctx, cancel := context.WithCancel(ctxFor(t))
			defer cancel()
			r := &cancellingReader{r: newRand(uint64(at)), n: at, cancel: cancel}
			// A stream far longer than the cancellation point: Put must stop
			// on its own, not run to the end.
			err := f.Bucket.Put(ctx, key, io.LimitReader(r, at+Large), nil)
			require.Error(t, err)
			require.ErrorIs(t, err, context.Canceled)
			requireNotFound(t, f.Bucket, key)
			require.Empty(t, list(t, f.Bucket, ""), "a cancelled put left objects")
			requireNoIncompleteUploads(t, f)
		})
	}
}

func testFailedOverwrite(t *testing.T, f Fixture) {
	put(t, f.Bucket, "keep", []byte("the good copy"))
	for _, at := range []int64{0, 5*MiB + 1} {
		r := &failingReader{r: newRand(9), n: at, err: errReader}
		require.ErrorIs(t, f.Bucket.Put(ctxFor(t), "keep", r, nil), errReader)
		require.Equal(t, "the good copy", string(get(t, f.Bucket, "keep")))
	}
	require.Equal(t, []string{"keep"}, keys(list(t, f.Bucket, "")))
	requireNoIncompleteUploads(t, f)
}

func testConcurrentPuts(t *testing.T, f Fixture) {
	const n = 8
	ctx := ctxFor(t)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			size := int64(i+1) * 700 * 1024
			errs[i] = f.Bucket.Put(ctx, fmt.Sprintf("concurrent/%d", i), data(uint64(100+i), size), nil)
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	for i := range n {
		size := int64(i+1) * 700 * 1024
		got := get(t, f.Bucket, fmt.Sprintf("concurrent/%d", i))
		require.EqualValues(t, size, len(got))
		want := digest(uint64(100+i), size)
		require.Equal(t, want, sha256.Sum256(got), "object %d", i)
	}
	require.Len(t, list(t, f.Bucket, "concurrent/"), n)
}

func testGetPartialRead(t *testing.T, f Fixture) {
	require.NoError(t, f.Bucket.Put(ctxFor(t), "partial", data(7, 3*MiB), nil))
	rc, err := f.Bucket.Get(ctxFor(t), "partial")
	require.NoError(t, err)
	buf := make([]byte, 1024)
	_, err = io.ReadFull(rc, buf)
	require.NoError(t, err)
	require.NoError(t, rc.Close(), "close after a partial read")
	want := make([]byte, 1024)
	_, _ = io.ReadFull(newRand(7), want)
	require.Equal(t, want, buf)
}

// lostAnswerMultipart is larger than the part size or the single-request
// threshold of every uploader the suite runs on.
const lostAnswerMultipart = 24 * MiB

// testPutIfAbsentLostAnswer: a store kept the object but its answer was
// lost, and the client's retry was refused because the key now exists.
// The object is the writer's own: PutIfAbsent succeeds.
func testPutIfAbsentLostAnswer(t *testing.T, f Fixture) {
	if f.LoseAnswer == nil {
		return // no network between the writer and the store
	}
	ctx := ctxFor(t)
	for i, n := range []int64{1 << 10, lostAnswerMultipart} {
		key := fmt.Sprintf("lost-answer/%d", n)
		fired := f.LoseAnswer(t)
		opts := &storage.PutOptions{Metadata: map[string]string{"case": "lost-answer"}}
		err := storage.PutIfAbsent(ctx, f.Bucket, key, data(uint64(40+i), n), opts)
		require.True(t, fired(), "the answer of the put of %d bytes was lost", n)
		require.NoError(t, err, "a put of %d bytes whose answer was lost", n)
		require.Equal(t, digest(uint64(40+i), n), sha256.Sum256(get(t, f.Bucket, key)))
		info, err := f.Bucket.Stat(ctx, key)
		require.NoError(t, err)
		require.NotContains(t, info.Metadata, storage.PutTokenKey, "Stat hides the put's token")
		if !f.NoMetadata {
			require.Equal(t, "lost-answer", info.Metadata["case"])
		}

		// Another writer's put is still refused.
		err = storage.PutIfAbsent(ctx, f.Bucket, key, bytes.NewReader([]byte("other")), opts)
		require.ErrorIs(t, err, storage.ErrExist)
	}
}

func testPutIfAbsent(t *testing.T, f Fixture) {
	ctx := ctxFor(t)
	require.NoError(t, storage.PutIfAbsent(ctx, f.Bucket, "once", bytes.NewReader([]byte("first")), nil))
	err := storage.PutIfAbsent(ctx, f.Bucket, "once", bytes.NewReader([]byte("second")), nil)
	require.ErrorIs(t, err, storage.ErrExist)
	require.Equal(t, "first", string(get(t, f.Bucket, "once")))

	// A segment ending in "..", which file stores escape.
	require.NoError(t, storage.PutIfAbsent(ctx, f.Bucket, "c/v1../x", bytes.NewReader([]byte("dots")), nil))
	require.Equal(t, "dots", string(get(t, f.Bucket, "c/v1../x")))
	require.Equal(t, []string{"c/v1../x"}, keys(list(t, f.Bucket, "c/")))
}
