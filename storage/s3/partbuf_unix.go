//go:build unix

package s3

import (
	"fmt"
	"syscall"
)

// newPartBuffer returns a part buffer of size bytes mapped outside the Go
// heap. The collector sizes the heap it lets grow between collections
// from the heap it finds live: part buffers on the heap (32 MiB by
// default) would count twice in the process' peak. Mapped ones count once
// and go back to the system when the Put ends.
func newPartBuffer(size int64) (*[]byte, error) {
	b, err := syscall.Mmap(-1, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("map a part buffer of %d bytes: %w", size, err)
	}
	return &b, nil
}

// freePartBuffer unmaps a buffer of newPartBuffer. Nothing may use it
// afterwards: every request body over it must be detached.
func freePartBuffer(b *[]byte) {
	_ = syscall.Munmap(*b)
	*b = nil
}
