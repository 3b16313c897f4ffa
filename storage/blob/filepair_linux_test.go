package blob_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// putPair is PutThenStage of a data object and a manifest.
func putPair(ctx context.Context, b *blob.Bucket) (storage.Staged, error) {
	return b.PutThenStage(ctx, storage.StagePut{Key: "prod/seg", Body: strings.NewReader("segment")},
		storage.StagePut{Key: "prod/seg.json", Body: strings.NewReader("{}")})
}

// TestFilePairSharedOrder records the syncs of PutThenStage on a bucket
// whose puts share syncs: both objects are written and the first is named
// before the one round it waits for, the second is not named by it; no
// sync of a single file or directory; Publish of the second then waits
// for one more round, once it is named.
func TestFilePairSharedOrder(t *testing.T) {
	b, dir := openShared(t, "")
	first, second := filepath.Join(dir, "prod", "seg"), filepath.Join(dir, "prod", "seg.json")
	var got []syncRecord
	var mu sync.Mutex
	rounds := 0
	blob.OnSync(b, func(kind, path string) error {
		_, ferr := os.Stat(first)
		_, serr := os.Stat(second)
		tmps, _ := filepath.Glob(second + ".*.tmp*")
		mu.Lock()
		defer mu.Unlock()
		if kind == "fs" {
			if rounds++; rounds == 1 {
				assert.Len(t, tmps, 2, "the second's temporary data and attributes at the first round: %v", tmps)
			}
		}
		got = append(got, syncRecord{kind: kind, path: path, named: ferr == nil, attrs: serr == nil})
		return nil
	})
	s, err := putPair(t.Context(), b)
	require.NoError(t, err)
	want := []syncRecord{{kind: "fs", path: dir, named: true}}
	if blob.FlushesAfterSyncfs(b) {
		want = append(want, syncRecord{kind: "fs-dir", path: dir, named: true})
	}
	assert.Equal(t, want, got, "first named before its one round, the second not")
	assert.Equal(t, "segment", getString(t, b, "prod/seg"))
	_, err = b.Stat(t.Context(), "prod/seg.json")
	require.ErrorIs(t, err, storage.ErrNotFound, "the second is visible before Publish")

	got = nil
	require.NoError(t, s.Publish(t.Context()))
	require.NotEmpty(t, got)
	assert.Equal(t, syncRecord{kind: "fs", path: dir, named: true, attrs: true}, got[0], "the second's name synced")
	assert.Equal(t, "{}", getString(t, b, "prod/seg.json"))
	assert.ElementsMatch(t, []string{"prod/seg", "prod/seg.attrs", "prod/seg.json", "prod/seg.json.attrs"}, filesUnder(t, dir))
}

// TestFilePairSharedFallsBack: when the round fails (its error may be
// another file's), the first's data, attributes and directories and the
// second's temporary data and attributes are synced one by one, and
// PutThenStage succeeds when those do.
func TestFilePairSharedFallsBack(t *testing.T) {
	b, _ := openShared(t, "")
	kinds := syncKinds(b, func(kind string, _ int) error {
		if kind == "fs" {
			return syscall.EIO
		}
		return nil
	})
	s, err := putPair(t.Context(), b)
	require.NoError(t, err)
	blob.OnSync(b, nil)
	count := map[string]int{}
	for _, k := range *kinds {
		count[k]++
	}
	assert.Equal(t, 2, count["data"], "%v", *kinds)
	assert.Equal(t, 2, count["attrs"], "%v", *kinds)
	assert.Equal(t, 2, count["dir"], "prod/ and the bucket's: %v", *kinds)
	require.NoError(t, s.Publish(t.Context()))
	assert.Equal(t, "segment", getString(t, b, "prod/seg"))
	assert.Equal(t, "{}", getString(t, b, "prod/seg.json"))
}

// TestFilePairFailuresLeaveNothing: PutThenStage fails with an error
// naming the key it is of, and leaves nothing of either object, when the
// first's key is taken (another's object kept), when the second's is, and
// when the round and then a file's own sync fail; the same on a bucket
// that syncs each file.
func TestFilePairFailuresLeaveNothing(t *testing.T) {
	for _, tc := range []struct {
		name, key string
		shared    bool
		is        error
		setup     func(t *testing.T, b *blob.Bucket) context.Context
		left      []string
	}{
		{name: "first taken", key: "prod/seg", shared: true, is: storage.ErrExist, left: []string{"prod/seg", "prod/seg.attrs"},
			setup: func(t *testing.T, b *blob.Bucket) context.Context {
				require.NoError(t, b.Put(t.Context(), "prod/seg", strings.NewReader("theirs"), nil))
				return t.Context()
			}},
		{name: "second taken", key: "prod/seg.json", shared: true, is: storage.ErrExist, left: []string{"prod/seg.json", "prod/seg.json.attrs"},
			setup: func(t *testing.T, b *blob.Bucket) context.Context {
				require.NoError(t, b.Put(t.Context(), "prod/seg.json", strings.NewReader("theirs"), nil))
				return t.Context()
			}},
		{name: "first's data sync", key: "prod/seg", shared: true, is: syscall.EIO,
			setup: func(_ *testing.T, b *blob.Bucket) context.Context {
				syncKinds(b, func(kind string, _ int) error {
					if kind == "fs" || kind == "data" {
						return syscall.EIO
					}
					return nil
				})
				return t.Context()
			}},
		{name: "second's attributes sync", key: "prod/seg.json", shared: true, is: syscall.EIO,
			setup: func(_ *testing.T, b *blob.Bucket) context.Context {
				syncKinds(b, func(kind string, n int) error {
					if kind == "fs" || kind == "attrs" && n > 3 { // fs, data, attrs (the first's), dir, dir, data, attrs
						return syscall.EIO
					}
					return nil
				})
				return t.Context()
			}},
		{name: "each file: second's data sync", key: "prod/seg.json",
			is: syscall.EIO,
			setup: func(_ *testing.T, b *blob.Bucket) context.Context {
				blob.OnSync(b, func(kind, path string) error {
					if kind == "data" && strings.Contains(path, "seg.json") {
						return syscall.EIO
					}
					return nil
				})
				return t.Context()
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b *blob.Bucket
			var dir string
			if tc.shared {
				b, dir = openShared(t, "")
			} else {
				dir = t.TempDir()
				b = openFile(t, dir, "")
			}
			ctx := tc.setup(t, b)
			_, err := putPair(ctx, b)
			blob.OnSync(b, nil)
			require.ErrorIs(t, err, tc.is)
			var se *storage.Error
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tc.key, se.Key)
			assert.ElementsMatch(t, tc.left, filesUnder(t, dir), "files left")
			if len(tc.left) > 0 {
				assert.Equal(t, "theirs", getString(t, b, tc.left[0]), "another's object")
			}
		})
	}
}

// TestFilePairCancelInTheRound: a context that ends while the round
// hangs (a dead disk) ends PutThenStage at once with its error; the first
// object, named and complete, stays (a writer of the same key was refused
// for it already), and nothing is left of the second.
func TestFilePairCancelInTheRound(t *testing.T) {
	b, dir := openShared(t, "")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	returned := make(chan struct{})
	blob.OnSync(b, func(kind, _ string) error {
		if kind == "fs" {
			err := b.PutIfAbsent(t.Context(), "prod/seg", strings.NewReader("theirs"), nil)
			assert.ErrorIs(t, err, storage.ErrExist, "the first is visible during the round")
			cancel()
			select { // the round hangs until PutThenStage returned
			case <-returned:
			case <-time.After(30 * time.Second):
			}
		}
		return nil
	})
	_, err := putPair(ctx, b)
	close(returned)
	require.ErrorIs(t, err, context.Canceled)
	blob.OnSync(b, nil)
	assert.Equal(t, "segment", getString(t, b, "prod/seg"))
	assert.ElementsMatch(t, []string{"prod/seg", "prod/seg.attrs"}, filesUnder(t, dir))
}
