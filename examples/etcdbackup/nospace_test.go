package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/smallfs"
	"github.com/etcdbackup/etcdbackup/storage"
)

// filesIn returns the files under dir, relative to it.
func filesIn(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		out = append(out, rel)
		return err
	}))
	return out
}

// TestSaveNoSpace saves to a file:// destination on a full file system:
// the save fails and says there is no space, nothing is listed and no
// file is left behind; once space is freed the next save succeeds and
// verifies.
func TestSaveNoSpace(t *testing.T) {
	tr := &transcript{t: t}
	etcd := etcdtest.Start(t)
	_, err := etcdtest.Fill(t.Context(), etcd.Client(t), etcdtest.FillOptions{Keys: 500, Seed: 3})
	require.NoError(t, err)
	fsDir := smallfs.Tmpfs(t, 4<<20)
	dir := filepath.Join(fsDir, "backups")
	require.NoError(t, os.Mkdir(dir, 0o700))
	dest := "--destination=file://" + dir
	save := []string{"save", "--endpoints=" + strings.Join(etcd.Endpoints(), ","), "--cluster=prod", "--quiet", dest}

	filler := smallfs.FillTo(t, fsDir, "filler", 8<<10)
	r := tr.run("", save...)
	require.Equal(t, exitFailure, r.code, "%s", r)
	require.Contains(t, r.stderr, storage.ErrNoSpace.Error(), "%s", r)
	require.Empty(t, listJSON(t, tr, dest, "--cluster=prod", "--all"))
	require.Empty(t, filesIn(t, dir), "files left behind")

	require.NoError(t, os.Remove(filler))
	id := tr.ok(save...).lastLine()
	tr.ok("verify", dest, "--cluster=prod", "--backup="+id, "--quiet")
}

// TestFollowNoSpace runs follow on a file:// destination whose file system
// fills up: the follower reports that there is no space and retries, and
// once space is freed it resumes with no gap and no double in its chain,
// which restores to the last revision written.
func TestFollowNoSpace(t *testing.T) {
	tr := &transcript{t: t}
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	writeSome(t, cli, "/before", 10)
	fsDir := smallfs.Tmpfs(t, 16<<20)
	dir := filepath.Join(fsDir, "backups")
	require.NoError(t, os.Mkdir(dir, 0o700))
	dest := "--destination=file://" + dir

	f := startFollow(t, "--endpoints="+strings.Join(etcd.Endpoints(), ","), dest, "--cluster=prod", "--flush-interval=100ms")
	require.Eventually(t, func() bool { return strings.Contains(f.output(), "chain of prod started") }, 30*time.Second, 20*time.Millisecond)
	rev := writeSome(t, cli, "/a", 20)
	waitSegments(t, tr, rev, dest, "--cluster=prod")

	filler := smallfs.FillTo(t, fsDir, "filler", 0)
	rev = writeSome(t, cli, "/b", 30)
	require.Eventually(t, func() bool {
		return strings.Contains(f.output(), "failed on default, retrying") && strings.Contains(f.output(), storage.ErrNoSpace.Error())
	}, 30*time.Second, 20*time.Millisecond, "%s", f.output())
	_, last, _ := segments(t, tr, dest, "--cluster=prod")
	require.Less(t, last, rev, "a segment was stored on a full file system")

	require.NoError(t, os.Remove(filler))
	waitSegments(t, tr, rev, dest, "--cluster=prod")
	require.NoError(t, f.stop(t, syscall.SIGTERM), "exit 0 after SIGTERM\n%s", f.output())
	requireRestored(t, tr, cli, rev, dest, fmt.Sprintf("--to-revision=%d", rev))
}
