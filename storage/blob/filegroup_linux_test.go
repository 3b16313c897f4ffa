package blob_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// openShared opens a file:// bucket whose puts share syncs of its file
// system: in a temporary directory, or one in /dev/shm (tmpfs) where the
// temporary directories' file system syncs each file.
func openShared(t *testing.T, prefix string) (*blob.Bucket, string) {
	t.Helper()
	dir := t.TempDir()
	if b := openFileShared(t, dir, prefix); blob.SharesSyncs(b) {
		return b, dir
	}
	shm, err := os.MkdirTemp("/dev/shm", "etcdbackup-test-")
	require.NoError(t, err, "no file system here shares syncs")
	t.Cleanup(func() { _ = os.RemoveAll(shm) })
	b := openFileShared(t, shm, prefix)
	require.True(t, blob.SharesSyncs(b), "no file system here shares syncs")
	return b, shm
}

// TestFileSharedSyncOrder records the syncs of a put whose bucket shares
// syncs of its file system: one round once the temporary object's data
// and attributes are written, neither named; one once both are named;
// and no sync of a single file or directory.
func TestFileSharedSyncOrder(t *testing.T) {
	for _, exclusive := range []bool{false, true} {
		b, dir := openShared(t, "seed/")
		final := filepath.Join(dir, "seed", "prod", "day", "obj")
		var got []syncRecord
		var mu sync.Mutex
		blob.OnSync(b, func(kind, path string) error {
			_, err := os.Stat(final)
			_, aerr := os.Stat(final + ".attrs")
			tmps, _ := filepath.Glob(final + ".*.tmp*")
			mu.Lock()
			defer mu.Unlock()
			got = append(got, syncRecord{kind: kind, path: path, named: err == nil, attrs: aerr == nil})
			if len(got) == 1 {
				// The temporary object is written before the first round.
				assert.Len(t, tmps, 2, "temporary files at the first round: %v", tmps)
			}
			return nil
		})
		opts := &storage.PutOptions{Metadata: map[string]string{"run": "r1"}}
		if exclusive {
			require.NoError(t, b.PutIfAbsent(t.Context(), "prod/day/obj", strings.NewReader("data"), opts))
		} else {
			require.NoError(t, b.Put(t.Context(), "prod/day/obj", strings.NewReader("data"), opts))
		}
		want := []syncRecord{{kind: "fs", path: dir}, {kind: "fs", path: dir, named: true, attrs: true}}
		if blob.FlushesAfterSyncfs(b) {
			// No journal: each syncfs is followed by an fsync of the
			// bucket's directory, which flushes the device's cache again.
			want = []syncRecord{want[0], {kind: "fs-dir", path: dir}, want[1], {kind: "fs-dir", path: dir, named: true, attrs: true}}
		}
		assert.Equal(t, want, got, "exclusive %v", exclusive)
		info, err := b.Stat(t.Context(), "prod/day/obj")
		require.NoError(t, err)
		assert.Equal(t, "r1", info.Metadata["run"])
		assert.ElementsMatch(t, []string{"seed/prod/day/obj", "seed/prod/day/obj.attrs"}, filesUnder(t, dir), "temporary files left")
	}
}

// syncKinds records the kinds of the syncs of b, in order.
func syncKinds(b *blob.Bucket, fail func(kind string, n int) error) *[]string {
	var kinds []string
	var mu sync.Mutex
	blob.OnSync(b, func(kind, _ string) error {
		mu.Lock()
		defer mu.Unlock()
		kinds = append(kinds, kind)
		if fail != nil {
			return fail(kind, len(kinds))
		}
		return nil
	})
	return &kinds
}

// TestFileSharedSyncFallsBack: when a put's shared sync fails (its error
// may be another file's), the put syncs its own files one by one, as a
// bucket without shared syncs does, and succeeds when those succeed: the
// first round (the temporary object's data and attributes), or the
// second (the directories that hold its name).
func TestFileSharedSyncFallsBack(t *testing.T) {
	for _, round := range []int{1, 2} {
		for _, exclusive := range []bool{false, true} {
			b, _ := openShared(t, "")
			rounds := 0
			kinds := syncKinds(b, func(kind string, _ int) error {
				if kind == "fs" {
					if rounds++; rounds == round {
						return syscall.EIO
					}
				}
				return nil
			})
			var err error
			if exclusive {
				err = b.PutIfAbsent(t.Context(), "c/k", strings.NewReader("v2"), nil)
			} else {
				err = b.Put(t.Context(), "c/k", strings.NewReader("v2"), nil)
			}
			blob.OnSync(b, nil)
			require.NoError(t, err, "round %d, exclusive %v", round, exclusive)
			assert.Equal(t, "v2", getString(t, b, "c/k"))
			own := []string{"attrs", "data"}
			if round == 2 {
				own = []string{"dir", "dir"} // c/ and the bucket's
			}
			assert.Subset(t, *kinds, own, "round %d, exclusive %v: %v", round, exclusive, *kinds)
		}
	}
}

// TestFileSharedSyncOwnFilesFail: a put whose shared sync failed and whose
// own file then fails to sync fails with that error, names nothing (the
// key keeps its previous version, or stays absent) and leaves no
// temporary file; a plain put whose directory then fails to sync leaves
// the version it renamed into place, an exclusive one removes the object
// it linked, as without shared syncs.
func TestFileSharedSyncOwnFilesFail(t *testing.T) {
	for _, kind := range []string{"data", "dir"} {
		for _, exclusive := range []bool{false, true} {
			b, dir := openShared(t, "")
			require.NoError(t, b.Put(t.Context(), "c/old", strings.NewReader("v1"), nil))
			syncKinds(b, func(k string, _ int) error {
				if k == "fs" || k == kind {
					return syscall.EIO
				}
				return nil
			})
			err := putV2(t, b, exclusive)
			blob.OnSync(b, nil)
			require.ErrorIs(t, err, syscall.EIO, "%s, exclusive %v", kind, exclusive)
			assert.Contains(t, err.Error(), "sync "+map[string]string{"data": "data", "dir": "directory"}[kind])
			old := "v1"
			if kind == "dir" && !exclusive {
				old = "v2" // renamed over the old version before the sync
			}
			assert.Equal(t, old, getString(t, b, "c/old"), "%s, exclusive %v", kind, exclusive)
			assert.ElementsMatch(t, []string{"c/old", "c/old.attrs"}, filesUnder(t, dir), "%s, exclusive %v: files left", kind, exclusive)
		}
	}
}

// TestFileSharedPutPacesWriteback: a large put on a bucket whose puts
// share syncs has the kernel write its data back a chunk at a time as it
// goes (so that a shared sync never waits for all of it at once); a
// bucket that syncs each file does not; the object reads back whole.
func TestFileSharedPutPacesWriteback(t *testing.T) {
	size := 3*blob.WritebackChunk + blob.WritebackChunk/2
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	shared, _ := openShared(t, "")
	each := openFile(t, t.TempDir(), "")
	for name, b := range map[string]*blob.Bucket{"shared": shared, "each": each} {
		var got [][2]int64
		blob.OnWriteback(b, func(off, n int64) error { got = append(got, [2]int64{off, n}); return nil })
		require.NoError(t, b.PutIfAbsent(t.Context(), "full", bytes.NewReader(data), nil), name)
		c := int64(blob.WritebackChunk)
		if name == "shared" {
			// Contiguous from the start, a chunk or a little more each
			// (a chunk is started once a write reaches it).
			require.Len(t, got, 3, "%v", got)
			var next int64
			for _, w := range got {
				assert.Equal(t, next, w[0], "%v", got)
				assert.True(t, c <= w[1] && w[1] < 2*c, "%v", got)
				next += w[1]
			}
		} else {
			assert.Empty(t, got, name)
		}
		assert.Equal(t, data, []byte(getString(t, b, "full")), name)
	}
}

// TestFileSharedPutWritebackError: a write-back error the pacing meets
// fails the put (it is the put's own: the kernel reports it once), and
// leaves nothing; a file system that cannot start a write-back that way
// only stops the pacing.
func TestFileSharedPutWritebackError(t *testing.T) {
	data := bytes.Repeat([]byte("x"), 2*blob.WritebackChunk+1)
	for _, werr := range []error{syscall.EIO, syscall.EINVAL} {
		b, dir := openShared(t, "")
		calls := 0
		blob.OnWriteback(b, func(off, n int64) error { calls++; return werr })
		err := b.PutIfAbsent(t.Context(), "full", bytes.NewReader(data), nil)
		if werr == syscall.EIO {
			require.ErrorIs(t, err, syscall.EIO)
			assert.Empty(t, filesUnder(t, dir), "files left")
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, 1, calls, "write-backs tried after EINVAL")
		assert.Equal(t, string(data), getString(t, b, "full"))
	}
}

// TestFileSharedSyncErrorOfAnotherRound: when a shared sync failed while
// a put was being written, the put syncs its own files one by one even if
// its own round succeeds: that sync may have reported, and so hidden from
// every later one, the write-back error of the put's own pages. A put
// begun after the failure does not. The same holds for the round of the
// names, from before the put changed them.
func TestFileSharedSyncErrorOfAnotherRound(t *testing.T) {
	b, _ := openShared(t, "")
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- b.PutIfAbsent(t.Context(), "slow", pr, nil) }()
	_, err := pw.Write([]byte("first bytes")) // the slow put is writing
	require.NoError(t, err)
	fail := true
	kinds := syncKinds(b, func(kind string, _ int) error {
		if kind == "fs" && fail {
			fail = false
			return syscall.EIO
		}
		return nil
	})
	require.NoError(t, b.PutIfAbsent(t.Context(), "other", strings.NewReader("v"), nil), "the put whose round failed")
	*kinds = nil
	require.NoError(t, pw.Close())
	require.NoError(t, <-done)
	assert.Subset(t, *kinds, []string{"data", "attrs"}, "the slow put's own syncs: %v", *kinds)
	assert.NotContains(t, *kinds, "dir", "its names: no round failed since it named them")
	assert.Equal(t, "first bytes", getString(t, b, "slow"))

	*kinds = nil
	require.NoError(t, b.PutIfAbsent(t.Context(), "later", strings.NewReader("v"), nil))
	assert.NotContains(t, *kinds, "data", "a put begun after the failure: %v", *kinds)

	// A round that fails between a put's first name change and its own
	// round of the names (here, another put's, run from the rename of the
	// first put's attributes) makes the put sync its directories.
	renamed := false
	blob.OnRename(b, func(_, _ string) error {
		if renamed {
			return nil
		}
		renamed = true
		fail = true
		require.NoError(t, b.PutIfAbsent(t.Context(), "between", strings.NewReader("v"), nil))
		*kinds = nil
		return nil
	})
	require.NoError(t, b.Put(t.Context(), "named", strings.NewReader("v"), nil))
	assert.Contains(t, *kinds, "dir", "the names' syncs after a round failed since they changed: %v", *kinds)
}

// TestFileSharedFailuresLeaveNoDescriptor: puts whose shared syncs fail,
// whose own syncs then fail or not, and whose pacing fails, leave no
// descriptor open.
func TestFileSharedFailuresLeaveNoDescriptor(t *testing.T) {
	b, _ := openShared(t, "")
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		return len(ents)
	}
	before := count()
	blob.OnWriteback(b, func(off, n int64) error { return syscall.EIO })
	big := bytes.Repeat([]byte("x"), 2*blob.WritebackChunk+1)
	for range 3 {
		require.Error(t, b.PutIfAbsent(t.Context(), "big", bytes.NewReader(big), nil))
	}
	blob.OnWriteback(b, nil)
	for i, kinds := range [][]string{{"fs"}, {"fs", "data"}, {"fs", "dir"}} {
		syncKinds(b, func(k string, _ int) error {
			if slices.Contains(kinds, k) {
				return syscall.EIO
			}
			return nil
		})
		_ = b.PutIfAbsent(t.Context(), fmt.Sprint("a", i), strings.NewReader("v"), nil)
		_ = b.Put(t.Context(), fmt.Sprint("b", i), strings.NewReader("v"), nil)
	}
	blob.OnSync(b, nil)
	assert.Equal(t, before, count())
}

// TestFileSharedPublishIgnoresCancel: once a put has linked its object,
// the end of its context does not cut short its wait for the shared sync
// of the names (a reader may have seen the object), as it does not cut
// short an fsync: the put succeeds and the object stays. (A wait that
// watched the context would see it end and the round end at once, and
// pick either: twenty puts of each kind.)
func TestFileSharedPublishIgnoresCancel(t *testing.T) {
	for i := range 40 {
		exclusive := i%2 == 1
		b, _ := openShared(t, "")
		ctx, cancel := context.WithCancel(t.Context())
		n := 0
		blob.OnSync(b, func(kind, _ string) error {
			if kind != "fs" {
				return nil
			}
			if n++; n == 2 {
				cancel() // during the round of the names
			}
			return nil
		})
		var err error
		if exclusive {
			err = b.PutIfAbsent(ctx, "k", strings.NewReader("v"), nil)
		} else {
			err = b.Put(ctx, "k", strings.NewReader("v"), nil)
		}
		require.NoError(t, err, "exclusive %v", exclusive)
		assert.Equal(t, "v", getString(t, b, "k"))
	}
}
