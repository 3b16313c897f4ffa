package blob_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
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
		assert.Equal(t, want, got, "exclusive %v", exclusive)
		info, err := b.Stat(t.Context(), "prod/day/obj")
		require.NoError(t, err)
		assert.Equal(t, "r1", info.Metadata["run"])
		assert.ElementsMatch(t, []string{"seed/prod/day/obj", "seed/prod/day/obj.attrs"}, filesUnder(t, dir), "temporary files left")
	}
}

// TestFileSharedSyncFails: a put whose first round fails names nothing
// and leaves no temporary file; an exclusive put whose second round (the
// names) fails removes the object it linked; a plain one leaves the
// version it renamed into place, as with syncs of each file.
func TestFileSharedSyncFails(t *testing.T) {
	for _, round := range []int{1, 2} {
		for _, exclusive := range []bool{false, true} {
			b, dir := openShared(t, "")
			require.NoError(t, b.Put(t.Context(), "c/old", strings.NewReader("v1"), nil))
			n := 0
			blob.OnSync(b, func(kind, _ string) error {
				if n++; n == round {
					return syscall.EIO
				}
				return nil
			})
			key := "c/old"
			var err error
			if exclusive {
				key = "c/new"
				err = b.PutIfAbsent(t.Context(), key, strings.NewReader("v2"), nil)
			} else {
				err = b.Put(t.Context(), key, strings.NewReader("v2"), nil)
			}
			blob.OnSync(b, nil)
			require.ErrorIs(t, err, syscall.EIO, "round %d, exclusive %v", round, exclusive)
			assert.Contains(t, err.Error(), "sync the file system")
			want := []string{"c/old", "c/old.attrs"}
			old := "v1"
			if round == 2 && !exclusive {
				old = "v2" // renamed over the old version before the round
			}
			assert.Equal(t, old, getString(t, b, "c/old"), "round %d, exclusive %v", round, exclusive)
			assert.ElementsMatch(t, want, filesUnder(t, dir), "round %d, exclusive %v: files left", round, exclusive)
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

// TestFileSharedSyncErrorOfAnotherRound: a put fails when a shared sync
// failed while it was being written, even if its own round succeeds:
// that sync may have reported (and so hidden from every later one) the
// write-back error of the put's own pages.
func TestFileSharedSyncErrorOfAnotherRound(t *testing.T) {
	b, dir := openShared(t, "")
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- b.PutIfAbsent(t.Context(), "slow", pr, nil) }()
	_, err := pw.Write([]byte("first bytes")) // the slow put is writing
	require.NoError(t, err)
	fail := true
	blob.OnSync(b, func(kind, _ string) error {
		if fail {
			fail = false
			return syscall.EIO
		}
		return nil
	})
	require.ErrorIs(t, b.PutIfAbsent(t.Context(), "other", strings.NewReader("v"), nil), syscall.EIO, "the put whose round failed")
	require.NoError(t, pw.Close())
	err = <-done
	require.ErrorIs(t, err, syscall.EIO, "the put being written when another round failed")
	assert.Contains(t, err.Error(), "while the put was being written")
	assert.Empty(t, filesUnder(t, dir), "files left")
	require.NoError(t, b.PutIfAbsent(t.Context(), "later", strings.NewReader("v"), nil), "a put begun after the failure")
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
