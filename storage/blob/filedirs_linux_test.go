package blob_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// dirSyncs records the directories b syncs, relative to dir; fail, when
// set, answers each sync.
type dirSyncs struct {
	mu   sync.Mutex
	dirs []string
}

func recordDirSyncs(t *testing.T, b *blob.Bucket, dir string, fail func(rel string) error) *dirSyncs {
	t.Helper()
	r := new(dirSyncs)
	blob.OnSync(b, func(kind, path string) error {
		if kind != "dir" {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		r.mu.Lock()
		r.dirs = append(r.dirs, rel)
		r.mu.Unlock()
		if fail != nil {
			return fail(rel)
		}
		return nil
	})
	return r
}

// put puts key and returns the directories synced meanwhile.
func (r *dirSyncs) put(t *testing.T, b *blob.Bucket, key string) []string {
	t.Helper()
	r.mu.Lock()
	r.dirs = nil
	r.mu.Unlock()
	require.NoError(t, b.PutIfAbsent(t.Context(), key, strings.NewReader("data"), nil))
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dirs
}

// identifies reports whether the file system under dir lets a bucket tell
// a directory from one made later at its place; where it does not, every
// put syncs every directory above its key.
func identifies(t *testing.T, dir string) bool {
	t.Helper()
	_, ok := blob.IdentifyDir(dir)
	return ok
}

// TestFileSyncsDirectoryNamesOnce: a put syncs the directories above its
// key's only as far as those whose names an earlier put synced; one
// removed and made again is a new directory, whose name is synced again.
func TestFileSyncsDirectoryNamesOnce(t *testing.T) {
	dir := t.TempDir()
	b := openFile(t, dir, "seed/")
	r := recordDirSyncs(t, b, dir, nil)
	all := []string{"seed/prod/day", "seed/prod", "seed", "."}
	require.Equal(t, all, r.put(t, b, "prod/day/a"), "the first put syncs every directory")
	if !identifies(t, dir) {
		assert.Equal(t, all, r.put(t, b, "prod/day/b"), "no identities: every put syncs every directory")
		return
	}
	assert.Equal(t, []string{"seed/prod/day"}, r.put(t, b, "prod/day/b"), "the key's directory only: the names above it are durable")
	assert.Equal(t, []string{"seed/prod/other", "seed/prod"}, r.put(t, b, "prod/other/c"), "a new directory's name, up to a durable one")
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "seed", "prod")))
	assert.Equal(t, []string{"seed/prod/day", "seed/prod", "seed"}, r.put(t, b, "prod/day/d"), "directories made again are synced again")
	assert.Equal(t, []string{"seed/prod/day"}, r.put(t, b, "prod/day/e"))
}

// TestFileDirectoryMadeAgainIsAnother: a directory removed and made again
// at once, on a file system that reuses the inode number, is never taken
// for the one before (a birth time from the clock's coarse tick would be).
func TestFileDirectoryMadeAgainIsAnother(t *testing.T) {
	d := filepath.Join(t.TempDir(), "d")
	same := 0
	for range 300 {
		require.NoError(t, os.Mkdir(d, 0o700))
		before, ok := blob.IdentifyDir(d)
		require.NoError(t, os.Remove(d))
		require.NoError(t, os.Mkdir(d, 0o700))
		after, ok2 := blob.IdentifyDir(d)
		require.NoError(t, os.Remove(d))
		if ok && ok2 && before == after {
			same++
		}
	}
	assert.Zero(t, same, "directories made again taken for the one before")
}

// TestFileFailedWalkRecordsNothing: a put whose sync of a directory above
// its key fails leaves nothing durable: the next put syncs that directory.
func TestFileFailedWalkRecordsNothing(t *testing.T) {
	dir := t.TempDir()
	b := openFile(t, dir, "seed/")
	failSeed := true
	r := recordDirSyncs(t, b, dir, func(rel string) error {
		if failSeed && rel == "seed" {
			return errors.New("injected failure")
		}
		return nil
	})
	require.Error(t, b.PutIfAbsent(t.Context(), "prod/day/a", strings.NewReader("data"), nil))
	failSeed = false
	assert.Contains(t, r.put(t, b, "prod/day/b"), "seed", "the name prod in seed is not durable yet")
}

// TestFileWalkInFlightIsNotDurable: while one put still syncs the
// directories above a new directory, another put into it syncs them too
// instead of returning as if they were durable.
func TestFileWalkInFlightIsNotDurable(t *testing.T) {
	dir := t.TempDir()
	b := openFile(t, dir, "seed/")
	reached, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var seedSyncs int
	var second []string // what the second put synced
	blob.OnSync(b, func(kind, path string) error {
		if kind != "dir" {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		mu.Lock()
		if rel == "seed" {
			seedSyncs++
		}
		n := seedSyncs
		if n == 1 && rel == "seed" {
			mu.Unlock()
			close(reached)
			<-release // the first put waits here, about to sync seed
			return nil
		}
		if n >= 1 {
			second = append(second, filepath.ToSlash(rel))
		}
		mu.Unlock()
		return nil
	})
	first := make(chan error, 1)
	go func() { first <- b.PutIfAbsent(t.Context(), "prod/day/a", strings.NewReader("data"), nil) }()
	<-reached
	err := b.PutIfAbsent(t.Context(), "prod/day/b", strings.NewReader("data"), nil)
	close(release)
	require.NoError(t, err)
	require.NoError(t, <-first)
	mu.Lock()
	defer mu.Unlock()
	assert.Contains(t, second, "seed", "the second put returned before the name prod in seed was synced")
}

// TestFileMovedDirectoriesAreSyncedAgain: directories an operator moved
// (a directory above swapped for a new one, a symbolic link on the way
// pointed elsewhere) are synced again.
func TestFileMovedDirectoriesAreSyncedAgain(t *testing.T) {
	t.Run("swapped", func(t *testing.T) {
		dir := t.TempDir()
		b := openFile(t, dir, "seed/")
		r := recordDirSyncs(t, b, dir, nil)
		r.put(t, b, "prod/day/a")
		seed := filepath.Join(dir, "seed")
		require.NoError(t, os.Rename(filepath.Join(seed, "prod"), filepath.Join(seed, "prod.old")))
		require.NoError(t, os.Mkdir(filepath.Join(seed, "prod"), 0o700))
		require.NoError(t, os.Rename(filepath.Join(seed, "prod.old", "day"), filepath.Join(seed, "prod", "day")))
		assert.Equal(t, []string{"seed/prod/day", "seed/prod", "seed"}, r.put(t, b, "prod/day/b"))
	})
	t.Run("link", func(t *testing.T) {
		dir := t.TempDir()
		vol1, vol2, bucket := filepath.Join(dir, "vol1"), filepath.Join(dir, "vol2"), filepath.Join(dir, "bucket")
		for _, d := range []string{filepath.Join(vol1, "prod"), vol2, bucket} {
			require.NoError(t, os.MkdirAll(d, 0o700))
		}
		require.NoError(t, os.Symlink(filepath.Join(vol1, "prod"), filepath.Join(bucket, "prod")))
		b := openFile(t, bucket, "")
		r := recordDirSyncs(t, b, bucket, nil)
		r.put(t, b, "prod/day/a")
		require.NoError(t, os.Rename(filepath.Join(vol1, "prod"), filepath.Join(vol2, "prod")))
		require.NoError(t, os.Remove(filepath.Join(bucket, "prod")))
		require.NoError(t, os.Symlink(filepath.Join(vol2, "prod"), filepath.Join(bucket, "prod")))
		assert.Contains(t, r.put(t, b, "prod/day/b"), ".", "the new link's name in the bucket's directory")
	})
}
