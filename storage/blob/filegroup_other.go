//go:build !linux

package blob

import (
	"errors"
	"os"
)

// openGroupSync returns nil: only Linux's syncfs(2) syncs a file system
// and reports its write-back errors, so puts sync each file elsewhere.
func openGroupSync(string) *groupSync { return nil }

// deviceOf is not needed without a groupSync.
func deviceOf(string) (uint64, bool) { return 0, false }

// syncFileSystem is not called without a groupSync.
func (g *groupSync) syncFileSystem(func(string, *os.File) error) error { return errors.ErrUnsupported }

// startWriteback is not called without a groupSync.
func startWriteback(*os.File, int64, int64) error { return errors.ErrUnsupported }
