package blob

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback waits for the write-back of the bytes of f before off,
// then starts that of the bytes [off, off+n), with sync_file_range(2).
func startWriteback(f *os.File, off, n int64) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := sc.Control(func(fd uintptr) {
		if off > 0 {
			if serr = unix.SyncFileRange(int(fd), 0, off, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER); serr != nil {
				return
			}
		}
		serr = unix.SyncFileRange(int(fd), off, n, unix.SYNC_FILE_RANGE_WRITE)
	}); err != nil {
		return err
	}
	return serr
}
