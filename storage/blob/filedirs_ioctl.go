//go:build linux && (amd64 || arm64 || riscv64 || loong64 || s390x || 386 || arm)

package blob

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// fsIocGetVersion is linux/fs.h's FS_IOC_GETVERSION, _IOR('v', 1, long),
// in the ioctl encoding of these architectures.
const fsIocGetVersion = 2<<30 | uint(unsafe.Sizeof(uintptr(0)))<<16 | 'v'<<8 | 1

// identifyDir returns the identity of the directory dir names (not of a
// symbolic link there), and false when it cannot tell one directory made
// at that place from another: the file system does not give an inode's
// generation (FS_IOC_GETVERSION), or dir is not a directory.
func identifyDir(dir string) (dirID, bool) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return dirID{}, false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return dirID{}, false
	}
	gen, err := unix.IoctlGetUint32(fd, fsIocGetVersion)
	if err != nil {
		return dirID{}, false
	}
	return dirID{dev: st.Dev, ino: st.Ino, generation: gen}, true
}
