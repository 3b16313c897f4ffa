package restore_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/restore"
)

// TestRestoreIntoEmptyDirectoryKeepsIt: an empty data directory that
// exists (a mount point, a volume) is restored into in place, keeping its
// mode, not removed and recreated.
func TestRestoreIntoEmptyDirectoryKeepsIt(t *testing.T) {
	snap := writeFile(t, "snapshot.db", smallSnapshot(t))
	dir := filepath.Join(t.TempDir(), "mount")
	require.NoError(t, os.Mkdir(dir, 0o750))
	require.NoError(t, os.Chmod(dir, 0o750))
	before, err := os.Stat(dir)
	require.NoError(t, err)

	_, err = (&restore.Restorer{}).RestoreFile(t.Context(), snap, restore.Member{Name: "m", DataDir: dir, PeerURLs: []string{"http://127.0.0.1:2380"}})
	require.NoError(t, err)
	after, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o750)|os.ModeDir, after.Mode(), "the directory's mode is kept")
	require.True(t, os.SameFile(before, after), "the directory is the same, not a new one")
	_, err = os.Stat(filepath.Join(dir, "member", "snap", "db"))
	require.NoError(t, err)
	require.Equal(t, []string{"mount"}, dirEntries(t, filepath.Dir(dir)), "no staging directory left")
}
