//go:build !unix

package s3

// newPartBuffer returns a part buffer of size bytes on the Go heap.
func newPartBuffer(size int64) (*[]byte, error) {
	b := make([]byte, size)
	return &b, nil
}

// freePartBuffer drops a buffer of newPartBuffer.
func freePartBuffer(b *[]byte) { *b = nil }
