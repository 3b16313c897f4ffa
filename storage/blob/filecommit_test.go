package blob_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	gcblob "gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"

	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/internal/smallfs"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// openFile opens dir as a file:// bucket with the given prefix, as
// destinations open it, but syncing each file and directory
// (Options.SyncEachFile): the path most tests of the commit record.
func openFile(t *testing.T, dir, prefix string) *blob.Bucket {
	t.Helper()
	return openFileWith(t, dir, prefix, &blob.Options{SyncEachFile: true})
}

// openFileShared opens dir as a file:// bucket with the given prefix, as
// destinations open it: on Linux its puts share syncs of the file system.
func openFileShared(t *testing.T, dir, prefix string) *blob.Bucket {
	t.Helper()
	return openFileWith(t, dir, prefix, nil)
}

func openFileWith(t *testing.T, dir, prefix string, opts *blob.Options) *blob.Bucket {
	t.Helper()
	mux := new(gcblob.URLMux)
	mux.RegisterBucket(fileblob.Scheme, &fileblob.URLOpener{Options: fileblob.Options{NoTempDir: true}})
	u := "file://" + filepath.ToSlash(dir)
	if prefix != "" {
		u += "?prefix=" + prefix
	}
	b, err := blob.Open(t.Context(), mux, u, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// syncRecord is one sync of a put, with what the key's name showed when
// it happened.
type syncRecord struct {
	kind, path   string
	named, attrs bool // the object's file and its ".attrs" file existed
}

// TestFileSyncOrder records every sync a put on a file:// bucket makes and
// what was visible at each: the data of the temporary object (the file
// that gets the key's name) and its attributes are synced before either
// has the key's name, and the directories from the
// key's up to the bucket's once both have. Removing any of the syncs, or
// moving one across a link or rename, fails it.
func TestFileSyncOrder(t *testing.T) {
	puts := map[string]func(b *blob.Bucket, key, body string) error{
		"Put": func(b *blob.Bucket, key, body string) error {
			return b.Put(t.Context(), key, strings.NewReader(body), &storage.PutOptions{Metadata: map[string]string{"run": "r1"}})
		},
		"PutIfAbsent": func(b *blob.Bucket, key, body string) error {
			return b.PutIfAbsent(t.Context(), key, strings.NewReader(body), &storage.PutOptions{Metadata: map[string]string{"run": "r1"}})
		},
	}
	for name, put := range puts {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			b := openFile(t, dir, "seed/")
			final := filepath.Join(dir, "seed", "prod", "day", "obj")
			var (
				mu  sync.Mutex // the data and attributes sync at once
				got []syncRecord
			)
			blob.OnSync(b, func(kind, path string) error {
				_, err := os.Stat(final)
				_, aerr := os.Stat(final + ".attrs")
				mu.Lock()
				defer mu.Unlock()
				got = append(got, syncRecord{kind: kind, path: path, named: err == nil, attrs: aerr == nil})
				return nil
			})
			require.NoError(t, put(b, "prod/day/obj", "data"))
			// The first two in either order.
			if len(got) >= 2 && got[0].kind == "data" {
				got[0], got[1] = got[1], got[0]
			}

			tmp := `^` + regexp.QuoteMeta(final) + `\.[0-9a-f]{16}\.tmp`
			want := []struct {
				kind, path   string
				named, attrs bool
			}{
				{"attrs", tmp + `\.attrs$`, false, false},
				{"data", tmp + `$`, false, false},
				{"dir", `^` + regexp.QuoteMeta(filepath.Dir(final)) + `$`, true, true},
				{"dir", `^` + regexp.QuoteMeta(filepath.Join(dir, "seed", "prod")) + `$`, true, true},
				{"dir", `^` + regexp.QuoteMeta(filepath.Join(dir, "seed")) + `$`, true, true},
				{"dir", `^` + regexp.QuoteMeta(dir) + `$`, true, true},
			}
			require.Len(t, got, len(want), "syncs: %+v", got)
			for i, w := range want {
				assert.Equal(t, w.kind, got[i].kind, "sync %d", i)
				assert.Regexp(t, w.path, got[i].path, "sync %d", i)
				assert.Equal(t, w.named, got[i].named, "sync %d (%s): object named", i, w.kind)
				assert.Equal(t, w.attrs, got[i].attrs, "sync %d (%s): attributes named", i, w.kind)
			}
			info, err := b.Stat(t.Context(), "prod/day/obj")
			require.NoError(t, err)
			assert.Equal(t, "r1", info.Metadata["run"])
			assert.ElementsMatch(t, []string{"seed/prod/day/obj", "seed/prod/day/obj.attrs"}, filesUnder(t, dir), "temporary files left")
		})
	}
}

// TestFileDirSyncUnsupported: on a file system that cannot sync a
// directory the put fails with an error that says so, and leaves no
// object and no temporary file.
func TestFileDirSyncUnsupported(t *testing.T) {
	dir := t.TempDir()
	b := openFile(t, dir, "")
	blob.OnSync(b, func(kind, _ string) error {
		if kind == "dir" {
			return syscall.EINVAL
		}
		return nil
	})
	for _, exclusive := range []bool{false, true} {
		var err error
		if exclusive {
			err = b.PutIfAbsent(t.Context(), "c/obj", strings.NewReader("data"), nil)
		} else {
			err = b.Put(t.Context(), "c/obj", strings.NewReader("data"), nil)
		}
		require.Error(t, err)
		assert.Contains(t, err.Error(), "cannot sync a directory")
		if exclusive {
			assert.Empty(t, filesUnder(t, dir))
			continue
		}
		// A plain put leaves what it renamed into place: removing it
		// would also remove any previous version, which it replaced.
		assert.ElementsMatch(t, []string{"c/obj", "c/obj.attrs"}, filesUnder(t, dir))
		require.NoError(t, b.Delete(t.Context(), "c/obj"))
	}
}

// TestFilePutOverwriteDirSyncFailKeepsKey: a plain put over an existing
// key whose directory sync fails returns the error and leaves the key with
// the new version, which replaced the old one; it does not delete the key.
// An exclusive put that fails so leaves the other writer's object alone.
func TestFilePutOverwriteDirSyncFailKeepsKey(t *testing.T) {
	dir := t.TempDir()
	b := openFile(t, dir, "")
	require.NoError(t, b.Put(t.Context(), "state/lock", strings.NewReader("v1"), nil))
	blob.OnSync(b, func(kind, _ string) error {
		if kind == "dir" {
			return syscall.EIO
		}
		return nil
	})
	err := b.Put(t.Context(), "state/lock", strings.NewReader("v2"), nil)
	require.Error(t, err)
	blob.OnSync(b, nil)
	assert.Equal(t, "v2", getString(t, b, "state/lock"), "the key after a failed overwrite")
	assert.ElementsMatch(t, []string{"state/lock", "state/lock.attrs"}, filesUnder(t, dir), "temporary files left")
}

// putV2 puts "v2" over "c/old" with a plain put, or as "c/new" with an
// exclusive one.
func putV2(t *testing.T, b *blob.Bucket, exclusive bool) error {
	if exclusive {
		return b.PutIfAbsent(t.Context(), "c/new", strings.NewReader("v2"), nil)
	}
	return b.Put(t.Context(), "c/old", strings.NewReader("v2"), nil)
}

// TestFileTempSyncFails: a put whose data or attributes cannot be synced
// fails with the error, names no object (the key keeps its previous
// version, or stays absent) and leaves no temporary file.
func TestFileTempSyncFails(t *testing.T) {
	for _, kind := range []string{"data", "attrs"} {
		for _, exclusive := range []bool{false, true} {
			dir := t.TempDir()
			b := openFile(t, dir, "")
			require.NoError(t, b.Put(t.Context(), "c/old", strings.NewReader("v1"), nil))
			blob.OnSync(b, func(k, _ string) error {
				if k == kind {
					return syscall.EIO
				}
				return nil
			})
			err := putV2(t, b, exclusive)
			blob.OnSync(b, nil)
			require.ErrorIs(t, err, syscall.EIO, "%s, exclusive %v", kind, exclusive)
			assert.Contains(t, err.Error(), "sync "+map[string]string{"data": "data", "attrs": "attributes"}[kind])
			assert.Equal(t, "v1", getString(t, b, "c/old"), "%s, exclusive %v", kind, exclusive)
			assert.ElementsMatch(t, []string{"c/old", "c/old.attrs"}, filesUnder(t, dir), "%s, exclusive %v: files left", kind, exclusive)
		}
	}
}

// TestFileAttrsRenameNoSpace: a put whose attributes cannot be renamed
// into place (ENOSPC) fails with storage.ErrNoSpace, leaves no temporary
// file, and leaves the key as it was: an exclusive put removes the object
// it linked, a plain put has not replaced the previous version.
func TestFileAttrsRenameNoSpace(t *testing.T) {
	for _, exclusive := range []bool{false, true} {
		dir := t.TempDir()
		b := openFile(t, dir, "")
		putString(t, b, "keep", "x")
		if !exclusive {
			putString(t, b, "c/obj", "v1")
		}
		before := filesUnder(t, dir)
		blob.OnRename(b, func(oldpath, _ string) error {
			if strings.HasSuffix(oldpath, ".attrs") {
				return syscall.ENOSPC
			}
			return nil
		})
		var err error
		if exclusive {
			err = b.PutIfAbsent(t.Context(), "c/obj", strings.NewReader("v2"), nil)
		} else {
			err = b.Put(t.Context(), "c/obj", strings.NewReader("v2"), nil)
		}
		blob.OnRename(b, nil)
		require.ErrorIs(t, err, storage.ErrNoSpace, "exclusive=%v", exclusive)
		assert.Equal(t, before, filesUnder(t, dir), "exclusive=%v: files left behind", exclusive)
		if exclusive {
			_, err = b.Stat(t.Context(), "c/obj")
			require.ErrorIs(t, err, storage.ErrNotFound)
		} else {
			assert.Equal(t, "v1", getString(t, b, "c/obj"))
		}
	}
}

// TestFileNoSpace fills a real 1 MiB file system beside a file://
// destination: a put that does not fit fails with storage.ErrNoSpace and
// a message that says so, leaves nothing visible and no temporary file,
// and the same put succeeds once space is freed.
func TestFileNoSpace(t *testing.T) {
	fsDir := smallfs.Tmpfs(t, 1<<20)
	dir := filepath.Join(fsDir, "backups")
	require.NoError(t, os.Mkdir(dir, 0o700))
	b := openFile(t, dir, "")
	putString(t, b, "keep", "x")
	before := filesUnder(t, dir)
	body := make([]byte, 512<<10)
	_, _ = rand.Read(body)

	for _, exclusive := range []bool{false, true} {
		put := func() error {
			if exclusive {
				return b.PutIfAbsent(t.Context(), "c/big", bytes.NewReader(body), nil)
			}
			return b.Put(t.Context(), "c/big", bytes.NewReader(body), nil)
		}
		filler := smallfs.Fill(t, fsDir, "filler", 640<<10)
		err := put()
		require.ErrorIs(t, err, storage.ErrNoSpace, "exclusive=%v", exclusive)
		assert.Contains(t, err.Error(), "no space")
		assert.Equal(t, []string{"keep"}, listKeys(t, b, ""))
		assert.Equal(t, before, filesUnder(t, dir), "files left behind")

		require.NoError(t, os.Remove(filler))
		require.NoError(t, put(), "exclusive=%v", exclusive)
		assert.Equal(t, string(body), getString(t, b, "c/big"))
		require.NoError(t, b.Delete(t.Context(), "c/big"))
	}
}

// TestS3NoSpace: a MinIO on a full 32 MiB file system refuses an s3blob
// put, which fails with storage.ErrNoSpace and leaves no object.
func TestS3NoSpace(t *testing.T) {
	fsDir := smallfs.Tmpfs(t, 32<<20)
	data := filepath.Join(fsDir, "data")
	require.NoError(t, os.Mkdir(data, 0o700))
	f := newS3Fixture(t, miniotest.StartIn(t, data), nil)
	smallfs.FillTo(t, fsDir, "filler", 1<<20)
	// The SDK sends "Expect: 100-continue" and waits a second for the
	// answer; on a busy machine MinIO may answer later, the body races
	// its 507 and the connection is reset (or the body's write finds it
	// closed: a broken pipe) before the answer is read. Such a put lost
	// its answer: it is asked again, a few times.
	var err error
	for range 5 {
		err = f.bucket.Put(t.Context(), "big", bytes.NewReader(make([]byte, 4<<20)), nil)
		if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
			break
		}
	}
	require.ErrorIs(t, err, storage.ErrNoSpace)
	_, err = f.bucket.Stat(t.Context(), "big")
	require.ErrorIs(t, err, storage.ErrNotFound)
}

// TestFilePutRenamesAttrsFirst: a plain put renames the attributes into
// place before the data, so a crash between the two never pairs the new
// data with the previous version's attributes.
func TestFilePutRenamesAttrsFirst(t *testing.T) {
	dir := t.TempDir()
	b := openFile(t, dir, "")
	putString(t, b, "c/obj", "v1")
	var renamed []string
	blob.OnRename(b, func(_, newpath string) error {
		renamed = append(renamed, filepath.Base(newpath))
		return nil
	})
	require.NoError(t, b.Put(t.Context(), "c/obj", strings.NewReader("v2"), nil))
	assert.Equal(t, []string{"obj.attrs", "obj"}, renamed)
}

// TestFileKilledAfterLinkTempCollected: a writer killed after the link of
// an exclusive put leaves "<key>.<hex>.tmp", a hidden second name of the
// object that keeps its space after the object is deleted. The bucket
// yields it as an unfinished upload of its key, aged by its modification
// time, and AbortUpload removes it with its attributes, as retention does
// with stale S3 multipart uploads.
func TestFileKilledAfterLinkTempCollected(t *testing.T) {
	dir := t.TempDir()
	b := openFile(t, dir, "seed/")
	require.NoError(t, b.PutIfAbsent(t.Context(), "c/obj", strings.NewReader("data"), nil))
	putString(t, b, "d/other", "x")
	final := filepath.Join(dir, "seed", "c", "obj")
	tmp := final + ".0123456789abcdef.tmp"
	require.NoError(t, os.Link(final, tmp)) // the state a kill at file-linked leaves
	require.NoError(t, os.WriteFile(tmp+".attrs", []byte("{}"), 0o600))
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	require.NoError(t, os.Chtimes(tmp, old, old))
	require.NoError(t, b.Delete(t.Context(), "c/obj"))
	assert.Equal(t, []string{"d/other"}, listKeys(t, b, ""))

	var ups []storage.Upload
	for u, err := range b.IncompleteUploads(t.Context(), "c/") {
		require.NoError(t, err)
		ups = append(ups, u)
	}
	require.Len(t, ups, 1)
	assert.Equal(t, "c/obj", ups[0].Key)
	assert.True(t, ups[0].Initiated.Equal(old), "initiated %v, want %v", ups[0].Initiated, old)
	for u, err := range b.IncompleteUploads(t.Context(), "d/") {
		t.Fatalf("upload %+v (%v) under another prefix", u, err)
	}
	require.Error(t, b.AbortUpload(t.Context(), storage.Upload{Key: "c/obj", ID: "/../../d/other"}))
	require.NoError(t, b.AbortUpload(t.Context(), ups[0]))
	assert.ElementsMatch(t, []string{"seed/d/other", "seed/d/other.attrs"}, filesUnder(t, dir), "files left")
}

// TestFileStagedTwoNamedInOrder: two objects staged at once and published
// one after the other, as a segment and its manifest are: both are synced
// (data and attributes) before either has its name, and every directory
// sync of the first's publish happens before the second has its name.
func TestFileStagedTwoNamedInOrder(t *testing.T) {
	dir := t.TempDir()
	b := openFile(t, dir, "")
	first, second := filepath.Join(dir, "c", "data"), filepath.Join(dir, "c", "manifest")
	var (
		mu  sync.Mutex
		got []syncRecord // named: the first's name; attrs: the second's
	)
	blob.OnSync(b, func(kind, path string) error {
		_, ferr := os.Stat(first)
		_, serr := os.Stat(second)
		mu.Lock()
		defer mu.Unlock()
		got = append(got, syncRecord{kind: kind, path: path, named: ferr == nil, attrs: serr == nil})
		return nil
	})
	a, err := b.Stage(t.Context(), "c/data", strings.NewReader("data"), nil)
	require.NoError(t, err)
	m, err := b.Stage(t.Context(), "c/manifest", strings.NewReader("{}"), nil)
	require.NoError(t, err)
	mu.Lock()
	staged := len(got)
	mu.Unlock()
	require.NoError(t, a.Publish(t.Context()))
	mu.Lock()
	published := len(got)
	mu.Unlock()
	require.NoError(t, m.Publish(t.Context()))

	require.Equal(t, 4, staged, "syncs of the two stages: %+v", got)
	for _, r := range got[:staged] {
		assert.False(t, r.named || r.attrs, "a stage's sync after a name was given: %+v", r)
		assert.NotEqual(t, "dir", r.kind)
	}
	require.Greater(t, published, staged, "the first publish syncs its directory")
	for _, r := range got[staged:published] {
		assert.Equal(t, "dir", r.kind)
		assert.True(t, r.named, "the first has its name when its directory is synced")
		assert.False(t, r.attrs, "the second has no name while the first's directory is synced")
	}
	assert.Equal(t, "data", getString(t, b, "c/data"))
	assert.Equal(t, "{}", getString(t, b, "c/manifest"))
	assert.ElementsMatch(t, []string{"c/data", "c/data.attrs", "c/manifest", "c/manifest.attrs"}, filesUnder(t, dir), "temporary files left")
}
