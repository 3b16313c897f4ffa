package blob

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// writebackChunk is how much of a put's data a file bucket whose puts
// share syncs lets accumulate unwritten before it has the kernel start
// writing it: a put of gigabytes (a full backup, a compaction's
// synthetic full) then holds at most about two chunks of dirty pages, so
// that a shared sync, which waits for every dirty page of the file
// system, does not wait for all of them and keep the other puts'
// rounds (a follower's segments) waiting behind one large write.
const writebackChunk = 8 << 20

// writebackWriter writes a put's data through w into the file *file
// (fileblob's, known after the first write) and, every writebackChunk
// bytes, starts the write-back of the chunk just written and waits for
// that of the chunk before it, as RocksDB's bytes_per_sync does. The put
// is durable once its sync round ends; a write-back error the pacing
// meets is the put's own and fails it (sync_file_range reports it to the
// first caller only), while a file system that cannot start a write-back
// this way (EINVAL, ENOSYS, EOPNOTSUPP, ESPIPE) stops the pacing and
// nothing else.
type writebackWriter struct {
	w    io.Writer
	file **os.File
	// writeback waits for the write-back of the bytes of f before off,
	// then starts that of the bytes [off, off+n).
	writeback func(f *os.File, off, n int64) error

	written int64 // bytes written through w
	started int64 // bytes whose write-back was started
	off     bool  // a write-back failed: pace no more
}

func (ww *writebackWriter) Write(p []byte) (int, error) {
	n, err := ww.w.Write(p)
	ww.written += int64(n)
	if err != nil || ww.off || *ww.file == nil || ww.written-ww.started < writebackChunk {
		return n, err
	}
	if werr := ww.writeback(*ww.file, ww.started, ww.written-ww.started); werr != nil {
		if unsupportedWriteback(werr) {
			ww.off = true
			return n, nil
		}
		return n, fmt.Errorf("write back: %w", werr)
	}
	ww.started = ww.written
	return n, nil
}

// unsupportedWriteback reports whether err says that the file system
// cannot start a write-back with sync_file_range(2).
func unsupportedWriteback(err error) bool {
	return errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ESPIPE) || errors.Is(err, errors.ErrUnsupported)
}

// writeback is startWriteback through the test hook when one is set.
func (b *Bucket) writeback(f *os.File, off, n int64) error {
	if b.onWriteback != nil {
		if err := b.onWriteback(off, n); err != nil {
			return err
		}
	}
	return startWriteback(f, off, n)
}
