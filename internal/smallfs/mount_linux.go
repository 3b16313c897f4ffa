package smallfs

import (
	"fmt"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size bytes on a new temporary directory, which
// it unmounts when the test ends, and returns the directory.
func Tmpfs(tb testing.TB, size int64) string {
	tb.Helper()
	dir := tb.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		tb.Fatalf("smallfs: mount a tmpfs of %d bytes on %s (needs root with CAP_SYS_ADMIN, as CI runs): %v", size, dir, err)
	}
	tb.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			tb.Errorf("smallfs: unmount %s: %v", dir, err)
		}
	})
	return dir
}

// FillTo writes a file named name into dir, on a file system of its own,
// that leaves about leave bytes free on it, and returns its path.
func FillTo(tb testing.TB, dir, name string, leave int64) string {
	tb.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		tb.Fatalf("smallfs: statfs %s: %v", dir, err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free <= leave {
		tb.Fatalf("smallfs: %s has %d bytes free, not more than %d", dir, free, leave)
	}
	return Fill(tb, dir, name, int(free-leave))
}
