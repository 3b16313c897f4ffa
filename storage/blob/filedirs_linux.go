package blob

import "golang.org/x/sys/unix"

// identifyDir returns dir's identity, and false when the file system does
// not give a directory's birth time (nothing is then remembered of it).
func identifyDir(dir string) (dirID, bool) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_INO|unix.STATX_BTIME|unix.STATX_TYPE, &st); err != nil {
		return dirID{}, false
	}
	if st.Mask&unix.STATX_BTIME == 0 || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return dirID{}, false
	}
	return dirID{
		dev:   unix.Mkdev(st.Dev_major, st.Dev_minor),
		ino:   st.Ino,
		birth: st.Btime.Sec*1e9 + int64(st.Btime.Nsec),
	}, true
}
