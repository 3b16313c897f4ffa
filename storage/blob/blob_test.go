package blob_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	gcblob "gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"

	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

var errBroken = errors.New("reader broke")

// brokenReader yields n bytes and then fails.
type brokenReader struct {
	n   int
	err error
}

func (r *brokenReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, r.err
	}
	p = p[:min(len(p), r.n)]
	for i := range p {
		p[i] = 'x'
	}
	r.n -= len(p)
	return len(p), nil
}

// buckets are the local drivers each test runs on.
func buckets(t *testing.T) map[string]*blob.Bucket {
	t.Helper()
	file, err := fileblob.OpenBucket(t.TempDir(), nil)
	require.NoError(t, err)
	nextTo, err := fileblob.OpenBucket(t.TempDir(), &fileblob.Options{NoTempDir: true, Metadata: fileblob.MetadataDontWrite})
	require.NoError(t, err)
	return map[string]*blob.Bucket{
		"mem":           blob.New(memblob.OpenBucket(nil), nil),
		"file":          blob.New(file, nil),
		"file-next-to":  blob.New(nextTo, nil),
		"mem-sortlist":  blob.New(memblob.OpenBucket(nil), &blob.Options{SortList: true}),
		"mem-tinyparts": blob.New(memblob.OpenBucket(nil), &blob.Options{PartSize: 1, MaxConcurrency: 1}),
	}
}

func putString(t *testing.T, b storage.Bucket, key, body string) {
	t.Helper()
	require.NoError(t, b.Put(t.Context(), key, strings.NewReader(body), nil), "put %q", key)
}

func getString(t *testing.T, b storage.Bucket, key string) string {
	t.Helper()
	rc, err := b.Get(t.Context(), key)
	require.NoError(t, err, "get %q", key)
	defer rc.Close()
	body, err := io.ReadAll(rc)
	require.NoError(t, err)
	return string(body)
}

func listKeys(t *testing.T, b storage.Bucket, prefix string) []string {
	t.Helper()
	var ks []string
	for info, err := range b.List(t.Context(), prefix) {
		require.NoError(t, err)
		ks = append(ks, info.Key)
	}
	return ks
}

// filesUnder lists the regular files below dir, relative to it.
func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		out = append(out, filepath.ToSlash(rel))
		return err
	}))
	return out
}

func TestFailedPutWrapsReaderErrorAndKeepsOld(t *testing.T) {
	for name, b := range buckets(t) {
		t.Run(name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			putString(t, b, "k", "old")
			for _, n := range []int{0, 1, 300 << 10} {
				err := b.Put(t.Context(), "k", &brokenReader{n: n, err: errBroken}, nil)
				require.ErrorIs(t, err, errBroken, "after %d bytes", n)
				var se *storage.Error
				require.ErrorAs(t, err, &se)
				assert.Equal(t, "put", se.Op)
				assert.Equal(t, "k", se.Key)
				assert.Equal(t, "old", getString(t, b, "k"))

				err = b.Put(t.Context(), "new", &brokenReader{n: n, err: errBroken}, nil)
				require.ErrorIs(t, err, errBroken)
				_, err = b.Stat(t.Context(), "new")
				require.ErrorIs(t, err, storage.ErrNotFound)
			}
			assert.Equal(t, []string{"k"}, listKeys(t, b, ""))
		})
	}
}

// cancelAfter cancels after n bytes and counts what is read after that.
type cancelAfter struct {
	n        int
	cancel   context.CancelFunc
	afterCan atomic.Int64
}

func (r *cancelAfter) Read(p []byte) (int, error) {
	if r.n <= 0 {
		r.cancel()
		r.afterCan.Add(int64(len(p)))
		return len(p), nil
	}
	p = p[:min(len(p), r.n)]
	r.n -= len(p)
	return len(p), nil
}

func TestCancelledPutStopsReading(t *testing.T) {
	for name, b := range buckets(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			r := &cancelAfter{n: 1 << 20, cancel: cancel}
			err := b.Put(ctx, "c", r, nil)
			require.ErrorIs(t, err, context.Canceled)
			// Put notices between two reads, not at the end of the stream.
			assert.LessOrEqual(t, r.afterCan.Load(), int64(1<<20))
			require.Empty(t, listKeys(t, b, ""))

			// A context cancelled before Put starts writes nothing.
			err = b.Put(ctx, "c", strings.NewReader("x"), nil)
			require.ErrorIs(t, err, context.Canceled)
			require.Empty(t, listKeys(t, b, ""))
		})
	}
}

func TestFailedPutLeavesNoFiles(t *testing.T) {
	for _, opts := range []*fileblob.Options{nil, {NoTempDir: true}, {NoTempDir: true, Metadata: fileblob.MetadataDontWrite}} {
		t.Run(fmt.Sprintf("%+v", opts), func(t *testing.T) {
			dir := t.TempDir()
			gb, err := fileblob.OpenBucket(dir, opts)
			require.NoError(t, err)
			b := blob.New(gb, nil)
			// A name unique to this run, to find fileblob's temporary
			// files in os.TempDir.
			base := fmt.Sprintf("unique-%d", os.Getpid())
			key := "dir/" + base

			putString(t, b, "keep", "x")
			before := filesUnder(t, dir)
			ctx, cancel := context.WithCancel(t.Context())
			r := &cancelAfter{n: 3 << 20, cancel: cancel}
			require.ErrorIs(t, b.Put(ctx, key, r, nil), context.Canceled)
			require.ErrorIs(t, b.Put(t.Context(), key, &brokenReader{n: 5 << 20, err: errBroken}, nil), errBroken)

			assert.Equal(t, before, filesUnder(t, dir), "files left in the bucket directory")
			stray, err := filepath.Glob(filepath.Join(os.TempDir(), base+".*.tmp"))
			require.NoError(t, err)
			assert.Empty(t, stray, "temporary files left in os.TempDir")
		})
	}
}

func TestFileHidesItsOwnFiles(t *testing.T) {
	dir := t.TempDir()
	gb, err := fileblob.OpenBucket(dir, nil)
	require.NoError(t, err)
	b := blob.New(gb, nil)

	opts := &storage.PutOptions{ContentType: "application/json", Metadata: map[string]string{"cluster": "a"}}
	require.NoError(t, b.Put(t.Context(), "sub/obj", strings.NewReader("{}"), opts))
	// fileblob keeps the type and metadata in a sidecar file.
	assert.ElementsMatch(t, []string{"sub/obj", "sub/obj.attrs"}, filesUnder(t, dir))
	a, err := gb.Attributes(t.Context(), "sub/obj")
	require.NoError(t, err)
	assert.Equal(t, "application/json", a.ContentType)
	assert.Equal(t, map[string]string{"cluster": "a"}, a.Metadata)

	// A temporary file stranded by a process that died mid-write.
	stray := filepath.Join(dir, "sub", "obj.18ea3ddc5e943cb5.tmp")
	require.NoError(t, os.WriteFile(stray, []byte("half"), 0o600))

	assert.Equal(t, []string{"sub/obj"}, listKeys(t, b, ""))
	assert.Equal(t, []string{"sub/obj"}, listKeys(t, b, "sub/"))

	for _, key := range []string{"sub/obj.attrs", "x.attrs", "sub/obj.18ea3ddc5e943cb5.tmp", "a.0123456789abcdef.tmp"} {
		require.ErrorIs(t, b.Put(t.Context(), key, strings.NewReader("x"), nil), storage.ErrInvalidKey, key)
		_, err := b.Stat(t.Context(), key)
		require.ErrorIs(t, err, storage.ErrInvalidKey, key)
		_, err = b.Get(t.Context(), key)
		require.ErrorIs(t, err, storage.ErrInvalidKey, key)
		require.ErrorIs(t, b.Delete(t.Context(), key), storage.ErrInvalidKey, key)
	}
	// Names that only resemble them are ordinary keys.
	for _, key := range []string{"a.tmp", "a.attrs.db", "a.0123456789abcdeg.tmp", "a.0123456789ABCDEF.tmp", "a.123.tmp"} {
		putString(t, b, key, key)
		assert.Equal(t, key, getString(t, b, key))
	}
	_, err = os.Stat(stray)
	require.NoError(t, err, "the stray file is hidden, not removed")
}

func TestFileListInByteOrder(t *testing.T) {
	// fileblob walks directories, so "a/..." comes before "a b" and "a-c";
	// with pages smaller than the listing its paging also loses and
	// repeats keys. A first page of 2 makes the adapter regrow the page.
	defer blob.SetFirstFilePage(2)()
	gb, err := fileblob.OpenBucket(t.TempDir(), nil)
	require.NoError(t, err)
	b := blob.New(gb, nil)
	ks := []string{"a b", "a/x", "a/y", "a/z", "a-c", "ü/1", "z", "a0", "b/1", "b/2", "b!", "日本/x", "b/0"}
	for _, k := range ks {
		putString(t, b, k, k)
	}
	want := slices.Clone(ks)
	slices.Sort(want)
	assert.Equal(t, want, listKeys(t, b, ""))
	assert.Equal(t, []string{"a b", "a-c", "a/x", "a/y", "a/z", "a0"}, listKeys(t, b, "a"))
	assert.Equal(t, []string{"b/0", "b/1", "b/2"}, listKeys(t, b, "b/"))

	// Stopping early is fine.
	for info, err := range b.List(t.Context(), "") {
		require.NoError(t, err)
		require.Equal(t, "a b", info.Key)
		break
	}
}

func TestFileKeyFolderCollision(t *testing.T) {
	dir := t.TempDir()
	gb, err := fileblob.OpenBucket(dir, nil)
	require.NoError(t, err)
	b := blob.New(gb, nil)

	putString(t, b, "a/b", "file")
	err = b.Put(t.Context(), "a/b/c", strings.NewReader("x"), nil)
	require.ErrorIs(t, err, storage.ErrInvalidKey)
	assert.Contains(t, err.Error(), "folder of other keys")
	_, err = b.Stat(t.Context(), "a/b/c")
	require.ErrorIs(t, err, storage.ErrNotFound)
	_, err = b.Get(t.Context(), "a/b/c")
	require.ErrorIs(t, err, storage.ErrNotFound)
	require.NoError(t, b.Delete(t.Context(), "a/b/c"))

	putString(t, b, "x/y/z", "deep")
	require.ErrorIs(t, b.Put(t.Context(), "x/y", strings.NewReader("x"), nil), storage.ErrInvalidKey)
	// "x" and "x/y" are folders, not objects: deleting them is deleting
	// missing keys.
	_, err = b.Stat(t.Context(), "x/y")
	require.ErrorIs(t, err, storage.ErrNotFound)
	require.NoError(t, b.Delete(t.Context(), "x/y"))
	require.NoError(t, b.Delete(t.Context(), "x"))
	assert.Equal(t, "deep", getString(t, b, "x/y/z"))
	assert.Equal(t, []string{"a/b", "x/y/z"}, listKeys(t, b, ""))
}

func TestNoContentSniffing(t *testing.T) {
	gb := memblob.OpenBucket(nil)
	b := blob.New(gb, nil)
	putString(t, b, "page", "<html><body>hi</body></html>")
	a, err := gb.Attributes(t.Context(), "page")
	require.NoError(t, err)
	assert.Equal(t, "application/octet-stream", a.ContentType)

	opts := &storage.PutOptions{ContentType: "application/zstd", Metadata: map[string]string{"cluster": "prod-a", "revision": "42"}}
	require.NoError(t, b.Put(t.Context(), "snap", strings.NewReader("x"), opts))
	a, err = gb.Attributes(t.Context(), "snap")
	require.NoError(t, err)
	assert.Equal(t, "application/zstd", a.ContentType)
	assert.Equal(t, opts.Metadata, a.Metadata)
}

func TestErrors(t *testing.T) {
	for name, b := range buckets(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			_, err := b.Get(ctx, "missing")
			require.ErrorIs(t, err, storage.ErrNotFound)
			var se *storage.Error
			require.ErrorAs(t, err, &se)
			assert.Equal(t, storage.Error{Op: "get", Key: "missing", Err: se.Err}, *se)
			_, err = b.Stat(ctx, "missing")
			require.ErrorIs(t, err, storage.ErrNotFound)
			require.NoError(t, b.Delete(ctx, "missing"))

			putString(t, b, "there", "x")
			info, err := b.Stat(ctx, "there")
			require.NoError(t, err)
			assert.Equal(t, "there", info.Key)
			assert.EqualValues(t, 1, info.Size)
			assert.False(t, info.ModTime.IsZero())
			assert.NotEmpty(t, info.ETag)
			require.NoError(t, b.Delete(ctx, "there"))
			_, err = b.Stat(ctx, "there")
			require.ErrorIs(t, err, storage.ErrNotFound)
		})
	}
}

func TestValidationBeforeIO(t *testing.T) {
	// A closed gocloud bucket fails every call: only validation can answer
	// ErrInvalidKey.
	gb := memblob.OpenBucket(nil)
	require.NoError(t, gb.Close())
	b := blob.New(gb, nil)
	ctx := t.Context()
	for _, key := range []string{"", "/a", "a/", "a//b", "../a", "a/./b", "bad\x00", "bad\xff"} {
		require.ErrorIs(t, b.Put(ctx, key, strings.NewReader("x"), nil), storage.ErrInvalidKey, "%q", key)
		require.ErrorIs(t, b.PutIfAbsent(ctx, key, strings.NewReader("x"), nil), storage.ErrInvalidKey, "%q", key)
		_, err := b.Get(ctx, key)
		require.ErrorIs(t, err, storage.ErrInvalidKey, "%q", key)
		_, err = b.Stat(ctx, key)
		require.ErrorIs(t, err, storage.ErrInvalidKey, "%q", key)
		require.ErrorIs(t, b.Delete(ctx, key), storage.ErrInvalidKey, "%q", key)
	}
	for _, prefix := range []string{"/a", "a//", "../"} {
		var got error
		for _, err := range b.List(ctx, prefix) {
			got = err
		}
		require.ErrorIs(t, got, storage.ErrInvalidKey, "%q", prefix)
	}
	// A valid key reaches the closed bucket.
	_, err := b.Stat(ctx, "ok")
	require.Error(t, err)
	require.NotErrorIs(t, err, storage.ErrInvalidKey)
}

func TestPutIfAbsent(t *testing.T) {
	t.Run("mem is atomic", func(t *testing.T) {
		b := blob.New(memblob.OpenBucket(nil), nil)
		for round := range 20 {
			key := fmt.Sprintf("race/%d", round)
			var wg sync.WaitGroup
			var wins atomic.Int32
			for i := range 8 {
				wg.Go(func() {
					err := b.PutIfAbsent(t.Context(), key, strings.NewReader(fmt.Sprint(i)), nil)
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
	})
	t.Run("file falls back", func(t *testing.T) {
		gb, err := fileblob.OpenBucket(t.TempDir(), nil)
		require.NoError(t, err)
		b := blob.New(gb, nil)
		err = b.PutIfAbsent(t.Context(), "k", strings.NewReader("x"), nil)
		require.ErrorIs(t, err, storage.ErrUnsupported)
		require.Empty(t, listKeys(t, b, ""))
		require.NoError(t, storage.PutIfAbsent(t.Context(), b, "k", strings.NewReader("first"), nil))
		require.ErrorIs(t, storage.PutIfAbsent(t.Context(), b, "k", strings.NewReader("second"), nil), storage.ErrExist)
		assert.Equal(t, "first", getString(t, b, "k"))
	})
	t.Run("NoExclusivePut", func(t *testing.T) {
		b := blob.New(memblob.OpenBucket(nil), &blob.Options{NoExclusivePut: true})
		require.ErrorIs(t, b.PutIfAbsent(t.Context(), "k", strings.NewReader("x"), nil), storage.ErrUnsupported)
	})
}

// unorderedDriver lists fixed keys in the order given, as a driver that
// does not sort would.
type unorderedDriver struct {
	driver.Bucket // nil: only the methods below are called
	keys          []string
}

func (d *unorderedDriver) ListPaged(context.Context, *driver.ListOptions) (*driver.ListPage, error) {
	page := &driver.ListPage{}
	for _, k := range d.keys {
		page.Objects = append(page.Objects, &driver.ListObject{Key: k, Size: int64(len(k))})
	}
	return page, nil
}
func (d *unorderedDriver) As(any) bool                        { return false }
func (d *unorderedDriver) ErrorAs(error, any) bool            { return false }
func (d *unorderedDriver) ErrorCode(error) gcerrors.ErrorCode { return gcerrors.Unknown }
func (d *unorderedDriver) Close() error                       { return nil }

func TestListOrderOfOtherDrivers(t *testing.T) {
	drv := &unorderedDriver{keys: []string{"a", "c", "b"}}
	b := blob.New(gcblob.NewBucket(drv), nil)
	var got []string
	var gotErr error
	for info, err := range b.List(t.Context(), "") {
		if err != nil {
			gotErr = err
			break
		}
		got = append(got, info.Key)
	}
	assert.Equal(t, []string{"a", "c"}, got)
	require.ErrorContains(t, gotErr, `driver listed "b" after "c"`)

	sorted := blob.New(gcblob.NewBucket(drv), &blob.Options{SortList: true})
	assert.Equal(t, []string{"a", "b", "c"}, listKeys(t, sorted, ""))
}

func TestUploadCleanerUnsupported(t *testing.T) {
	b := blob.New(memblob.OpenBucket(nil), nil)
	for _, err := range b.IncompleteUploads(t.Context(), "") {
		require.ErrorIs(t, err, storage.ErrUnsupported)
	}
	require.ErrorIs(t, b.AbortUpload(t.Context(), storage.Upload{Key: "k", ID: "1"}), storage.ErrUnsupported)
}

func TestOpenAndClose(t *testing.T) {
	mux := new(gcblob.URLMux)
	mux.RegisterBucket(memblob.Scheme, &memblob.URLOpener{})
	mux.RegisterBucket(fileblob.Scheme, &fileblob.URLOpener{})
	ctx := t.Context()

	_, err := blob.Open(ctx, nil, "mem://", nil)
	require.Error(t, err)
	_, err = blob.Open(ctx, mux, "gs://bucket", nil)
	require.Error(t, err, "scheme not registered")
	_, err = blob.Open(ctx, mux, "mem://", &blob.Options{PartSize: -1})
	require.Error(t, err)

	// Errors must not repeat what the URL carries beyond scheme, host and
	// path.
	_, err = blob.Open(ctx, mux, "mem://name?token=hunter2secret", nil)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hunter2secret")
	assert.Contains(t, err.Error(), "mem://name")
	_, err = blob.Open(ctx, mux, "file://user:pa55word@/no/such/dir?create_dir=&token=hunter2secret", nil)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hunter2secret")
	assert.NotContains(t, err.Error(), "pa55word")

	b, err := blob.Open(ctx, mux, "mem://", nil)
	require.NoError(t, err)
	putString(t, b, "k", "v")
	require.NoError(t, b.Close())
	require.NoError(t, b.Close(), "second close")
	require.Error(t, b.Put(ctx, "k", strings.NewReader("v"), nil), "bucket closed by Close")

	// New leaves the gocloud bucket to its owner.
	gb := memblob.OpenBucket(nil)
	nb := blob.New(gb, nil)
	require.NoError(t, nb.Close())
	require.NoError(t, gb.WriteAll(ctx, "still", []byte("open"), nil))
	assert.Equal(t, "open", getString(t, nb, "still"))
}

func TestAs(t *testing.T) {
	dir := t.TempDir()
	gb, err := fileblob.OpenBucket(dir, nil)
	require.NoError(t, err)
	b := blob.New(gb, nil)
	var fi os.FileInfo
	require.True(t, b.As(&fi))
	assert.Equal(t, filepath.Base(dir), fi.Name())
	var wrong *bytes.Buffer
	assert.False(t, b.As(&wrong))
}

// A file bucket lists while objects are written and deleted beside it:
// fileblob reads a directory and then stats each entry, so an upload
// renaming its temporary file into place, or a delete, in between fails
// the whole listing with NotFound. The adapter reads such a listing again;
// read once, as fileblob does, listings fail.
func TestFileListDuringWrites(t *testing.T) {
	// listFailures lists while writers rename and delete, rounds times or,
	// with untilFailure, until a listing fails.
	listFailures := func(t *testing.T, rounds int, untilFailure bool) int {
		gb, err := fileblob.OpenBucket(t.TempDir(), &fileblob.Options{NoTempDir: true})
		require.NoError(t, err)
		b := blob.New(gb, nil)
		ctx := t.Context()
		for i := range 20 { // objects that stay, so listings take a while
			putString(t, b, fmt.Sprintf("prod-a/kept-%02d.db", i), "snapshot")
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-time.After(time.Millisecond):
					}
					key := fmt.Sprintf("prod-a/%d-%d.db", w, i)
					assert.NoError(t, b.Put(ctx, key, strings.NewReader("snapshot"), nil))
					assert.NoError(t, b.Delete(ctx, key))
				}
			})
		}
		failures := 0
		for i := 0; i < rounds && !(untilFailure && failures > 0); i++ {
			for _, err := range b.List(ctx, "prod-a/") {
				if err != nil {
					assert.ErrorIs(t, err, storage.ErrNotFound)
					failures++
				}
			}
		}
		close(stop)
		wg.Wait()
		return failures
	}
	t.Run("read once", func(t *testing.T) {
		defer blob.SetFileListTries(1)()
		// A race is likely within a few hundred listings; a busy machine
		// may take more.
		assert.Positive(t, listFailures(t, 5000, true), "no listing raced a rename or a delete: the test proves nothing")
	})
	t.Run("read again", func(t *testing.T) {
		assert.Zero(t, listFailures(t, 200, false))
	})
}
