//go:build linux && (amd64 || arm64 || riscv64 || loong64 || s390x || 386 || arm)

package blob

import (
	"encoding/binary"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fsIocGetVersion is linux/fs.h's FS_IOC_GETVERSION, _IOR('v', 1, long),
// in the ioctl encoding of these architectures.
const fsIocGetVersion = 2<<30 | unsafe.Sizeof(uintptr(0))<<16 | 'v'<<8 | 1

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
	// The request's size is a long: a FUSE file system may answer with
	// that many bytes, where the kernel's write an int.
	var gen [8]byte
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), fsIocGetVersion, uintptr(unsafe.Pointer(&gen[0]))); errno != 0 {
		return dirID{}, false
	}
	return dirID{dev: uint64(st.Dev), ino: st.Ino, generation: binary.NativeEndian.Uint64(gen[:])}, true
}
