//go:build unix

package compact

import (
	"errors"
	"os"
	"syscall"
)

// sweepable says that stale work directories can be told from running
// compactions' (by their lock).
const sweepable = true

// tryLock takes an exclusive lock on f without waiting; false when
// another open file description holds it. The lock ends with f's close,
// or with the process.
func tryLock(f *os.File) (bool, error) {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}
