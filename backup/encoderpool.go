package backup

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Compressors are shared by every pipeline and follower of a process, so
// that a host following hundreds of clusters holds compressors for the
// encodings in flight, not one per cluster:
//
//   - Segments are compressed whole (EncodeAll) by one zstd encoder per
//     encoderKey, made with a concurrency of GOMAXPROCS (at most
//     maxSegmentEncodings): it holds that many encoder states (about 1.6
//     MiB each at the default level), and a segment waits for a free one. A follower used to hold its own
//     state for its life.
//   - Streams (full backups, gzip segments) take a compressor of their
//     encoderKey given back by an earlier stream, Reset, or a new one, and
//     give it back once closed cleanly; at most GOMAXPROCS per key are
//     kept idle, the others are left to the collector.
//
// One compressor never holds two streams: EncodeAll takes an encoder state
// for one call and resets it first, and a streaming compressor is Reset to
// its next writer only after the stream that held it was closed (one that
// failed is dropped, not given back).

// encoderKey names the settings a compressor is made with: compressors of
// one key are interchangeable. level is the codec's own level.
type encoderKey struct {
	compression Compression
	level       int
	concurrency int
	window      int
}

// zstdKey is the key of zstd compressors at level within budget (see
// zstdOptions).
func zstdKey(c Compression, level zstd.EncoderLevel, budget int64) encoderKey {
	k := encoderKey{compression: c, level: int(level), concurrency: 2}
	if budget <= 0 {
		return k
	}
	k.concurrency = 1
	if budget >= 16<<20 {
		k.concurrency = 2
	}
	window := int64(zstd.MinWindowSize)
	for window*2 <= min(budget/int64(4*k.concurrency), 8<<20) {
		window *= 2
	}
	k.window = int(window)
	return k
}

// zstdOptions returns the options of k's zstd encoder.
func (k encoderKey) zstdOptions() []zstd.EOption {
	opts := []zstd.EOption{zstd.WithEncoderLevel(zstd.EncoderLevel(k.level)), zstd.WithEncoderConcurrency(k.concurrency)}
	if k.window > 0 {
		opts = append(opts, zstd.WithWindowSize(k.window))
	}
	return opts
}

// maxSegmentEncodings bounds the segment encoder's states on a host of
// many cores: the encoder makes all of them at its first use, and a
// segment (at most MaxSegmentBytes) takes milliseconds to compress.
const maxSegmentEncodings = 8

var (
	segmentEncodersMu sync.Mutex
	segmentEncoders   = map[encoderKey]*zstd.Encoder{}
)

// segmentEncoder returns the process' zstd encoder of whole segments at
// level, for EncodeAll only (which it runs concurrently on at most
// GOMAXPROCS encoder states, and at most maxSegmentEncodings).
func segmentEncoder(c Compression, level zstd.EncoderLevel) (*zstd.Encoder, error) {
	k := encoderKey{compression: c, level: int(level), concurrency: min(max(runtime.GOMAXPROCS(0), 1), maxSegmentEncodings)}
	segmentEncodersMu.Lock()
	defer segmentEncodersMu.Unlock()
	if z := segmentEncoders[k]; z != nil {
		return z, nil
	}
	z, err := zstd.NewWriter(nil, k.zstdOptions()...)
	if err != nil {
		return nil, fmt.Errorf("start zstd: %w", err)
	}
	segmentEncoders[k] = z
	return z, nil
}

var (
	streamEncodersMu sync.Mutex
	streamEncoders   = map[encoderKey]chan io.WriteCloser{}
)

// idleCompressors returns the compressors of k given back and not taken
// again: at most GOMAXPROCS, so that a burst of streams (a host's
// followers all taking their first full backups) leaves no more behind
// than a process encodes at once.
func idleCompressors(k encoderKey) chan io.WriteCloser {
	streamEncodersMu.Lock()
	defer streamEncodersMu.Unlock()
	ch := streamEncoders[k]
	if ch == nil {
		ch = make(chan io.WriteCloser, max(runtime.GOMAXPROCS(0), 1))
		streamEncoders[k] = ch
	}
	return ch
}

// pooledCompressor is a streaming compressor of key, writing to the
// writer it was taken for until it is closed.
type pooledCompressor struct {
	key encoderKey
	w   io.WriteCloser // *zstd.Encoder or *gzip.Writer; nil once released
}

// takeCompressor returns a compressor of k writing to dst: one given back
// earlier, Reset to dst, or a new one.
func takeCompressor(k encoderKey, dst io.Writer) (*pooledCompressor, error) {
	select {
	case w := <-idleCompressors(k):
		switch w := w.(type) {
		case *zstd.Encoder:
			w.Reset(dst)
		case *gzip.Writer:
			w.Reset(dst)
		}
		return &pooledCompressor{key: k, w: w}, nil
	default:
	}
	switch k.compression.OrDefault() {
	case Gzip:
		w, err := gzip.NewWriterLevel(dst, k.level)
		if err != nil {
			return nil, fmt.Errorf("start gzip: %w", err)
		}
		return &pooledCompressor{key: k, w: w}, nil
	case None:
		return nil, errors.New("no compressor for none")
	}
	w, err := zstd.NewWriter(dst, k.zstdOptions()...)
	if err != nil {
		return nil, fmt.Errorf("start zstd: %w", err)
	}
	return &pooledCompressor{key: k, w: w}, nil
}

var errCompressorReleased = errors.New("compressor already closed")

func (c *pooledCompressor) Write(p []byte) (int, error) {
	if c.w == nil {
		return 0, errCompressorReleased
	}
	return c.w.Write(p)
}

// Close ends the stream; once it ended cleanly the compressor goes back to
// its pool, Reset to write nowhere, so that it keeps no reference to the
// stream's writer. A compressor whose stream failed is dropped.
func (c *pooledCompressor) Close() error {
	if c.w == nil {
		return errCompressorReleased
	}
	w := c.w
	c.w = nil
	if err := w.Close(); err != nil {
		c.drop(w)
		return err
	}
	switch z := w.(type) {
	case *zstd.Encoder:
		z.Reset(nil)
	case *gzip.Writer:
		z.Reset(io.Discard)
	}
	select {
	case idleCompressors(c.key) <- w:
	default: // enough are idle: left to the collector
	}
	return nil
}

// abort ends the stream without output, releasing the compressor's
// goroutines, and drops the compressor.
func (c *pooledCompressor) abort() {
	if c.w == nil {
		return
	}
	w := c.w
	c.w = nil
	c.drop(w)
}

func (c *pooledCompressor) drop(w io.WriteCloser) {
	if z, ok := w.(*zstd.Encoder); ok {
		z.Reset(io.Discard)
		_ = z.Close()
	}
}
