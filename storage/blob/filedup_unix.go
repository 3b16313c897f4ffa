//go:build unix

package blob

import (
	"os"
	"syscall"
)

// dupFile returns a second descriptor of f's open file, named name: a
// sync through it reports every write-back error of f's writes, as a sync
// through f would, and it keeps the file's inode, with the record of such
// errors, in memory after f is closed.
func dupFile(f *os.File, name string) (*os.File, error) {
	sc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var nfd int
	var derr error
	if err := sc.Control(func(fd uintptr) {
		syscall.ForkLock.RLock()
		defer syscall.ForkLock.RUnlock()
		if nfd, derr = syscall.Dup(int(fd)); derr == nil {
			syscall.CloseOnExec(nfd)
		}
	}); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, &os.PathError{Op: "dup", Path: f.Name(), Err: derr}
	}
	return os.NewFile(uintptr(nfd), name), nil
}
