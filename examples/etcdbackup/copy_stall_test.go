package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/destination"
)

// TestCopyStallTimeoutByDefault: copy bounds a stalled source or target
// by default (--stall-timeout, five minutes), and its Copier carries the
// flag's value; a negative one is a usage error.
func TestCopyStallTimeoutByDefault(t *testing.T) {
	tr := &transcript{t: t}
	r := tr.ok("copy", "--help")
	require.Contains(t, r.stdout, "-stall-timeout", r.stdout)
	require.Contains(t, r.stdout, "(default 5m0s)", r.stdout)
	tr.fails(exitUsage, "copy", "--from=file:///nonexistent/a", "--to=file:///nonexistent/b", "--cluster=prod", "--all", "--stall-timeout=-1s")

	reg, err := destination.NewRegistry(destination.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close() })
	dir := t.TempDir()
	from, err := reg.Add(t.Context(), destination.Spec{Name: "a", URL: "file://" + filepath.Join(dir, "a")})
	require.NoError(t, err)
	to, err := reg.Add(t.Context(), destination.Spec{Name: "b", URL: "file://" + filepath.Join(dir, "b")})
	require.NoError(t, err)
	f := copyFlags{stall: defaultCopyStall}
	require.Equal(t, defaultCopyStall, f.copier(from, to).StallTimeout)
}
