//go:build !linux

package smallfs

import "testing"

// Tmpfs mounts a tmpfs of size bytes on Linux; elsewhere it fails the
// test.
func Tmpfs(tb testing.TB, _ int64) string {
	tb.Helper()
	tb.Fatal("smallfs: mounting a tmpfs needs Linux")
	return ""
}

// FillTo fills a file system of its own on Linux; elsewhere it fails the
// test.
func FillTo(tb testing.TB, _, _ string, _ int64) string {
	tb.Helper()
	tb.Fatal("smallfs: needs Linux")
	return ""
}
