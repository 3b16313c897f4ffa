// Package smallfs mounts small file systems for tests that fill a disk: a
// tmpfs of a given size, which answers ENOSPC once full, as a full disk
// does. Mounting needs root (CAP_SYS_ADMIN) on Linux, which CI has; a test
// that asks for one fails, not skips, where it cannot mount, so that a
// disk-full test never passes by not running.
package smallfs

import (
	"os"
	"path/filepath"
	"testing"
)

// Fill writes a file of n bytes named name into dir, the way a disk fills
// up beside the backups, and returns its path. Remove it to free the
// space.
func Fill(tb testing.TB, dir, name string, n int) string {
	tb.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, make([]byte, n), 0o600); err != nil {
		tb.Fatalf("smallfs: fill %s: %v", path, err)
	}
	return path
}
