//go:build !unix

package blob

import (
	"errors"
	"os"
)

// dupFile is not available here: the caller syncs f before it is closed.
func dupFile(f *os.File, _ string) (*os.File, error) {
	return nil, errors.New("no dup(2) on this system")
}
