package blob_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// TestFileSyncOpensFilesWritable: the files a put syncs are open for
// writing, as Windows requires to flush them (FlushFileBuffers fails on a
// read-only handle); directories are open read-only.
func TestFileSyncOpensFilesWritable(t *testing.T) {
	dir := t.TempDir()
	b := openFile(t, dir, "")
	modes := map[string]int{}
	blob.OnSyncFile(b, func(kind string, f *os.File) error {
		sc, err := f.SyscallConn()
		require.NoError(t, err)
		var flags int
		var ferr error
		require.NoError(t, sc.Control(func(fd uintptr) {
			r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
			flags = int(r)
			if errno != 0 {
				ferr = errno
			}
		}))
		require.NoError(t, ferr)
		modes[kind] = flags & syscall.O_ACCMODE
		return nil
	})
	require.NoError(t, b.Put(t.Context(), "c/obj", strings.NewReader("data"), nil))
	assert.Equal(t, syscall.O_RDWR, modes["attrs"], "attributes file")
	assert.Equal(t, syscall.O_RDONLY, modes["dir"], "directory")
}

// TestFileSyncsDirectoryNamesOnce: a put syncs the directories above its
// key's only as far as one whose name an earlier put synced; one removed
// and made again is a new directory, whose name is synced again.
func TestFileSyncsDirectoryNamesOnce(t *testing.T) {
	dir := t.TempDir()
	b := openFile(t, dir, "seed/")
	var dirs []string
	blob.OnSync(b, func(kind, path string) error {
		if kind == "dir" {
			rel, err := filepath.Rel(dir, path)
			require.NoError(t, err)
			dirs = append(dirs, filepath.ToSlash(rel))
		}
		return nil
	})
	put := func(key string) []string {
		t.Helper()
		dirs = nil
		require.NoError(t, b.PutIfAbsent(t.Context(), key, strings.NewReader("data"), nil))
		return dirs
	}
	assert.Equal(t, []string{"seed/prod/day", "seed/prod", "seed", "."}, put("prod/day/a"), "the first put syncs every directory")
	assert.Equal(t, []string{"seed/prod/day"}, put("prod/day/b"), "the key's directory only: the names above it are durable")
	assert.Equal(t, []string{"seed/prod/other", "seed/prod"}, put("prod/other/c"), "a new directory's name, up to a durable one")
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "seed", "prod")))
	assert.Equal(t, []string{"seed/prod/day", "seed/prod", "seed"}, put("prod/day/d"), "directories made again are synced again")
	assert.Equal(t, []string{"seed/prod/day"}, put("prod/day/e"))
}
