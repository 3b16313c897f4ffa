package restore

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"sync"
	"sync/atomic"

	"github.com/etcdbackup/etcdbackup/backup"
)

// Read-ahead of the stored object: while the caller decrypts, decompresses,
// hashes and writes one buffer, a goroutine downloads and hashes the next
// ones, so network and CPU overlap on small machines. Memory is
// prefetchBuffers x prefetchBufferSize whatever the object's size.
const (
	prefetchBuffers    = 4
	prefetchBufferSize = 1 << 20
)

// sourceError marks a failure to read the stored object (a network error,
// a cancelled context), so that it is not mistaken for damaged bytes by the
// decoding layers above, which label every error of their input as
// ErrIntegrity.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

type chunk struct {
	b   []byte
	err error
}

// prefetcher reads src ahead in a goroutine, counting and hashing the bytes
// as they arrive. It is an io.Reader for one consumer goroutine at a time.
//
// Restore uses two: one reads the stored object from the network; when the
// backup is compressed or encrypted, a second one decodes ahead, so that
// decrypting and decompressing on one core overlap with hashing and
// writing the snapshot on another.
type prefetcher struct {
	src    io.ReadCloser
	cancel func()    // ends the context src was opened with
	limit  io.Reader // src, possibly limited
	full   chan chunk
	free   chan []byte
	done   chan struct{}
	closed sync.Once
	wg     sync.WaitGroup

	h hash.Hash // written by the goroutine; read after it ended; nil: no hashing
	// decoded marks a reader of decoded bytes, whose errors pass through
	// as they are: they are the decoder's verdicts on the data, not
	// failures of the source.
	decoded bool

	n atomic.Int64

	cur    chunk
	off    int
	err    error        // sticky end of stream for the consumer
	srcErr *sourceError // the source's failure, if any
}

// newPrefetcher starts reading src, at most limit bytes when limit >= 0,
// hashing what it reads unless hash is false. cancel must end the context
// src was opened with: Close calls it to end a read blocked on the
// network, since not every reader may be closed while another goroutine
// reads it.
func newPrefetcher(src io.ReadCloser, cancel func(), limit int64, hash bool) *prefetcher {
	return newPrefetcherOf(src, cancel, limit, hash, false)
}

func newPrefetcherOf(src io.ReadCloser, cancel func(), limit int64, hash, decoded bool) *prefetcher {
	p := &prefetcher{
		src:     src,
		cancel:  cancel,
		limit:   src,
		full:    make(chan chunk, prefetchBuffers),
		free:    make(chan []byte, prefetchBuffers),
		done:    make(chan struct{}),
		decoded: decoded,
	}
	if hash {
		p.h = sha256.New()
	}
	if limit >= 0 {
		p.limit = io.LimitReader(src, limit)
	}
	for range prefetchBuffers {
		p.free <- make([]byte, prefetchBufferSize)
	}
	p.wg.Go(p.run)
	return p
}

// newDecodeAhead reads dec ahead in a goroutine. cancel must end the
// download dec reads from: Close calls it first, so that a decoder waiting
// for bytes that will not come returns. dec itself is not closed.
func newDecodeAhead(dec io.Reader, cancel func()) *prefetcher {
	return newPrefetcherOf(io.NopCloser(dec), cancel, -1, false, true)
}

func (p *prefetcher) run() {
	for {
		var buf []byte
		select {
		case buf = <-p.free:
		case <-p.done:
			return
		}
		n, err := p.fill(buf)
		if n > 0 {
			if p.h != nil {
				p.h.Write(buf[:n])
			}
			p.n.Add(int64(n))
		}
		switch {
		case err == nil, p.decoded:
		case err == io.EOF, err == io.ErrUnexpectedEOF:
			err = io.EOF
		default:
			err = &sourceError{err: err}
		}
		select {
		case p.full <- chunk{b: buf[:n], err: err}:
		case <-p.done:
			return
		}
		if err != nil {
			return
		}
	}
}

// fill reads into buf until it is full or the source fails or ends. A
// decoded source's error is returned as it is, io.ErrUnexpectedEOF
// included; a download's short end reads as io.ErrUnexpectedEOF.
func (p *prefetcher) fill(buf []byte) (int, error) {
	if !p.decoded {
		return io.ReadFull(p.limit, buf)
	}
	n := 0
	for n < len(buf) {
		m, err := p.limit.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Read implements io.Reader. After the end of the stream it keeps
// returning io.EOF, which age's reader relies on.
func (p *prefetcher) Read(b []byte) (int, error) {
	for {
		if p.off < len(p.cur.b) {
			n := copy(b, p.cur.b[p.off:])
			p.off += n
			return n, nil
		}
		if p.cur.b != nil {
			p.free <- p.cur.b[:cap(p.cur.b)]
			p.cur = chunk{}
		}
		if p.err != nil {
			return 0, p.err
		}
		c := <-p.full
		p.cur, p.off = c, 0
		if c.err != nil {
			p.err = c.err
			if se, ok := c.err.(*sourceError); ok && !p.decoded {
				p.srcErr = se
			}
		}
		if len(c.b) == 0 {
			p.cur = chunk{}
			p.free <- c.b[:cap(c.b)]
		}
	}
}

// failure returns the source's read error, if reading it failed.
func (p *prefetcher) failure() error {
	if p.srcErr == nil {
		return nil
	}
	return p.srcErr.err
}

// read returns the number of bytes downloaded so far; safe from any
// goroutine.
func (p *prefetcher) read() int64 { return p.n.Load() }

// digest returns the size and sha256 of the whole download; the sha256 is
// empty if the prefetcher does not hash. It is valid once Read has returned
// io.EOF.
func (p *prefetcher) digest() backup.Digest {
	d := backup.Digest{Size: p.n.Load()}
	if p.h != nil {
		d.SHA256 = hex.EncodeToString(p.h.Sum(nil))
	}
	return d
}

// Close tells the goroutine to stop, cancels the source's context so that a
// Read of it blocked on the network returns, waits for the goroutine to end
// and closes the source.
func (p *prefetcher) Close() error {
	var err error
	p.closed.Do(func() {
		p.cancel()
		close(p.done)
		p.wg.Wait()
		err = p.src.Close()
	})
	return err
}
