//go:build unix

package compact_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/compact"
)

// TestCompactSweepsStaleWorkDirectories: the work directory a killed
// compaction left is removed by the next compaction in the same TempDir;
// that of a compaction still running (its lock held) stays, and the
// compaction leaves nothing of its own.
func TestCompactSweepsStaleWorkDirectories(t *testing.T) {
	c := startChain(t)
	ctx := t.Context()
	r, err := c.cli.Put(ctx, "/k", "v")
	require.NoError(t, err)
	c.waitCommitted(t, r.Header.Revision)

	tmp := t.TempDir()
	workDir := func(name string) string {
		dir := filepath.Join(tmp, name)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "db"), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "db", "db"), make([]byte, 1<<20), 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "running.lock"), nil, 0o600))
		return dir
	}
	stale, running := workDir("etcdbackup-compact-killed"), workDir("etcdbackup-compact-running")
	f, err := os.OpenFile(filepath.Join(running, "running.lock"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB))

	cp := c.compactor(t)
	cp.Restorer.TempDir = tmp
	_, err = cp.Compact(ctx, compact.Request{Cluster: "prod-a", Sources: c.sources(), Targets: c.targets(c.bucket)})
	require.NoError(t, err)
	require.NoDirExists(t, stale, "a killed compaction's directory is swept")
	require.DirExists(t, running, "a running compaction's directory stays")
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	require.Equal(t, []string{"etcdbackup-compact-running"}, names, "what the compaction left in its TempDir")
}
