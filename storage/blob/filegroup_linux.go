package blob

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// groupSyncFileSystems are the file systems whose syncfs(2) makes every
// file's data and every directory's names durable: local, journaling or
// copy-on-write (ext4 commits its journal and flushes the device's cache,
// XFS forces its log, Btrfs commits a transaction), or in memory. Network
// and FUSE file systems, and overlayfs, sync each file.
var groupSyncFileSystems = map[int64]bool{
	unix.EXT4_SUPER_MAGIC:  true, // ext2, ext3 and ext4 share it
	unix.XFS_SUPER_MAGIC:   true,
	unix.BTRFS_SUPER_MAGIC: true,
	unix.F2FS_SUPER_MAGIC:  true,
	unix.TMPFS_MAGIC:       true,
}

// openGroupSync returns the groupSync of the file system that holds dir,
// nil where puts must sync each file: a kernel before 5.8, whose syncfs(2)
// does not report write-back errors; a file system not listed in
// groupSyncFileSystems; a directory it cannot open.
func openGroupSync(dir string) *groupSync {
	if !syncfsReportsErrors(kernelRelease()) {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || !groupSyncFileSystems[int64(st.Type)] { //nolint:unconvert // Type is int32 on some architectures
		return nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil
	}
	dev, ok := fileDevice(f)
	if !ok {
		_ = f.Close()
		return nil
	}
	flushAfter := int64(st.Type) == unix.EXT4_SUPER_MAGIC && !ext4HasJournal(dev) //nolint:unconvert // Type is int32 on some architectures
	g := &groupSync{dev: dev, f: f, flushAfter: flushAfter}
	g.sync = func() error { return g.syncFileSystem(nil) }
	return g
}

// syncFileSystem is one round of g: syncfs(2) of the file system, then,
// with flushAfter, fsync(2) of the bucket's directory, which flushes the
// device's cache after every block syncfs wrote (see groupSync). hook,
// when set, sees each sync before it, with the kind "fs" or "fs-dir"; an
// error it returns stands for the sync's.
func (g *groupSync) syncFileSystem(hook func(kind string, f *os.File) error) error {
	if hook != nil {
		if err := hook("fs", g.f); err != nil {
			return &os.PathError{Op: "syncfs", Path: g.f.Name(), Err: err}
		}
	}
	if err := syncfs(g.f); err != nil {
		return err
	}
	if !g.flushAfter {
		return nil
	}
	if hook != nil {
		if err := hook("fs-dir", g.f); err != nil {
			return &os.PathError{Op: "sync", Path: g.f.Name(), Err: err}
		}
	}
	return g.f.Sync()
}

// ext4HasJournal reports whether the ext2/3/4 file system on device dev
// (mounted by the ext4 driver) has a journal: its
// /sys/fs/ext4/<device>/journal_task names the journal's thread, or
// "<none>". An ext2 or ext3 file system mounted by a driver of its own,
// or a device whose entry cannot be read, counts as without.
func ext4HasJournal(dev uint64) bool {
	link, err := os.Readlink(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(dev), unix.Minor(dev)))
	if err != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join("/sys/fs/ext4", filepath.Base(link), "journal_task"))
	if err != nil {
		return false
	}
	return journalTaskNamed(string(b))
}

// journalTaskNamed reports whether the text of an ext4 journal_task file
// names a thread (a journal), not "<none>".
func journalTaskNamed(text string) bool {
	_, err := strconv.Atoi(strings.TrimSpace(text))
	return err == nil
}

// syncfs syncs the file system that holds f.
func syncfs(f *os.File) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := sc.Control(func(fd uintptr) {
		for {
			if serr = unix.Syncfs(int(fd)); serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "syncfs", Path: f.Name(), Err: serr}
	}
	return nil
}

// kernelRelease is the running kernel's release, as uname -r prints it.
func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// syncfsReportsErrors reports whether a kernel of the given release
// reports write-back errors from syncfs(2): Linux 5.8 and later
// (735e4ae5ba28, "vfs: track per-sb writeback errors and report them to
// syncfs").
func syncfsReportsErrors(release string) bool {
	major, rest, _ := strings.Cut(release, ".")
	minor, _, _ := strings.Cut(rest, ".")
	minor, _, _ = strings.Cut(minor, "-")
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > 5 || ma == 5 && mi >= 8
}

// deviceOf returns the device of the file system that holds path,
// following symbolic links.
func deviceOf(path string) (uint64, bool) {
	return device(os.Stat(path))
}

// fileDevice returns the device of the file system that holds f.
func fileDevice(f *os.File) (uint64, bool) {
	return device(f.Stat())
}

// device returns the device of a stat's answer.
func device(fi os.FileInfo, err error) (uint64, bool) {
	if err != nil {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Dev), true //nolint:unconvert // Dev is uint32 on some architectures
}
