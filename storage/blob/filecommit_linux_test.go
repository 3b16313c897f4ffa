package blob_test

import (
	"os"
	"strings"
	"sync"
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
	var mu sync.Mutex // the data and attributes sync at once
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
		mu.Lock()
		defer mu.Unlock()
		modes[kind] = flags & syscall.O_ACCMODE
		return nil
	})
	require.NoError(t, b.Put(t.Context(), "c/obj", strings.NewReader("data"), nil))
	assert.Equal(t, syscall.O_RDWR, modes["data"], "data file")
	assert.Equal(t, syscall.O_RDWR, modes["attrs"], "attributes file")
	assert.Equal(t, syscall.O_RDONLY, modes["dir"], "directory")
}
