package blob

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSyncfsReportsErrors(t *testing.T) {
	for release, want := range map[string]bool{
		"6.18.44-fc-v669": true, "5.8.0": true, "5.10.0-28-amd64": true, "5.15": true, "10.1": true,
		"5.7.19": false, "4.19.0-27-amd64": false, "3.10.0-1160.el7.x86_64": false, "": false, "linux": false,
	} {
		assert.Equal(t, want, syncfsReportsErrors(release), release)
	}
}

// TestGroupSyncCoversItsFileSystem: a round covers paths on the bucket
// directory's file system only.
func TestGroupSyncCoversItsFileSystem(t *testing.T) {
	dir := t.TempDir()
	dev, ok := deviceOf(dir)
	require.True(t, ok)
	g := &groupSync{dev: dev}
	assert.True(t, g.covers(dir))
	assert.False(t, g.covers(dir, "/proc/self"), "a path on procfs")
	assert.False(t, g.covers(dir+"/missing"), "a path that does not exist")
	require.NoError(t, os.Symlink("/proc", dir+"/link"))
	assert.False(t, g.covers(dir+"/link"), "a link to a directory on procfs")
}

func TestJournalTaskNamed(t *testing.T) {
	assert.True(t, journalTaskNamed("1234\n"))
	assert.False(t, journalTaskNamed("<none>\n"))
	assert.False(t, journalTaskNamed(""))
}
