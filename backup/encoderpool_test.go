package backup

import (
	"bytes"
	"context"
	"errors"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSegmentCodecsShareTheEncoder: the segment codecs of a process's
// followers share one zstd encoder, which holds at most GOMAXPROCS
// encoder states, instead of one state (about 1.6 MiB) per follower.
func TestSegmentCodecsShareTheEncoder(t *testing.T) {
	p := &Pipeline{Compression: Zstd}
	a, err := newSegmentCodec("a", p)
	require.NoError(t, err)
	b, err := newSegmentCodec("b", p)
	require.NoError(t, err)
	require.Same(t, a.zstd, b.zstd)
}

// TestStreamCompressorsReused: a compressor closed cleanly serves the next
// stream of its key, Reset, and each stream decodes to its own bytes; one
// whose stream failed is dropped; at most GOMAXPROCS stay idle.
func TestStreamCompressorsReused(t *testing.T) {
	for _, c := range []Compression{Zstd, Gzip} {
		t.Run(string(c), func(t *testing.T) {
			key := encoderOptions{compression: Zstd, budget: 1 << 20}.zstdStreamKey()
			if c == Gzip {
				key = encoderKey{compression: Gzip, level: gzip.DefaultCompression}
			}
			dropIdle(key)
			stream := func(dst io.Writer, data []byte) (io.WriteCloser, error) {
				w, err := takeCompressor(key, dst)
				require.NoError(t, err)
				inner := w.w
				if _, err := w.Write(data); err != nil {
					w.abort() // as the pipeline does
					return inner, err
				}
				return inner, w.Close()
			}
			var first, second bytes.Buffer
			w1, err := stream(&first, bytes.Repeat([]byte("first stream "), 1000))
			require.NoError(t, err)
			w2, err := stream(&second, []byte("second"))
			require.NoError(t, err)
			require.Same(t, w1, w2, "the compressor is reused")
			requireDecodes(t, c, first.Bytes(), bytes.Repeat([]byte("first stream "), 1000))
			requireDecodes(t, c, second.Bytes(), []byte("second"))

			for _, size := range []int{10, 1 << 20} { // failing at Close, at Write
				_, err = stream(failingWriter{}, bytes.Repeat([]byte("x"), size))
				require.Error(t, err)
				require.Empty(t, idleCompressors(key), "a compressor whose stream failed is dropped")
			}

			var ws []*pooledCompressor
			for range runtime.GOMAXPROCS(0) + 3 {
				w, err := takeCompressor(key, io.Discard)
				require.NoError(t, err)
				ws = append(ws, w)
			}
			for _, w := range ws {
				require.NoError(t, w.Close())
				_, err := w.Write([]byte("after close"))
				require.ErrorIs(t, err, errCompressorReleased)
			}
			require.Len(t, idleCompressors(key), runtime.GOMAXPROCS(0))
		})
	}
}

func dropIdle(k encoderKey) {
	for {
		select {
		case <-idleCompressors(k):
		default:
			return
		}
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func requireDecodes(t *testing.T, c Compression, stored, want []byte) {
	t.Helper()
	var r io.Reader
	switch c {
	case Zstd:
		d, err := zstd.NewReader(bytes.NewReader(stored))
		require.NoError(t, err)
		defer d.Close()
		r = d
	case Gzip:
		d, err := gzip.NewReader(bytes.NewReader(stored))
		require.NoError(t, err)
		r = d
	}
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// countingSnapshotter counts the snapshots in flight; each waits until
// gate is closed.
type countingSnapshotter struct {
	inFlight, most atomic.Int32
	mu             sync.Mutex
	gate           chan struct{}
}

func (s *countingSnapshotter) Snapshot(ctx context.Context) (*Snapshot, error) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	s.mu.Lock()
	s.most.Store(max(s.most.Load(), n))
	s.mu.Unlock()
	select {
	case <-s.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return nil, errors.New("no snapshot")
}

// TestRunSlotsBoundBackupsInFlight: pipelines sharing RunSlots take their
// snapshots at most that many at a time; a run waiting for a slot ends
// with its context.
func TestRunSlotsBoundBackupsInFlight(t *testing.T) {
	slots := NewRunSlots(2)
	snap := &countingSnapshotter{gate: make(chan struct{})}
	var wg sync.WaitGroup
	for range 8 {
		p := &Pipeline{Snapshotter: snap, Slots: slots}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = p.Run(t.Context(), Request{Cluster: "prod", Name: "full", Targets: []Target{{Destination: "d", Uploader: discardUploader{}}}})
		}()
	}
	require.Eventually(t, func() bool { return snap.inFlight.Load() == 2 && slots.waiting.Load() == 6 }, 30*time.Second, time.Millisecond)
	close(snap.gate)
	wg.Wait()
	require.Equal(t, int32(2), snap.most.Load())

	release, err := slots.take(t.Context())
	require.NoError(t, err)
	release2, err := slots.take(t.Context())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = (&Pipeline{Snapshotter: snap, Slots: slots}).Run(ctx, Request{Cluster: "prod", Name: "full",
		Targets: []Target{{Destination: "d", Uploader: discardUploader{}}}})
	require.ErrorIs(t, err, context.Canceled)
	release()
	release2()

	// The zero RunSlots bounds nothing: it does not hang every run.
	ctx, cancel = context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err = (&Pipeline{Snapshotter: snap, Slots: &RunSlots{}}).Run(ctx, Request{Cluster: "prod", Name: "full",
		Targets: []Target{{Destination: "d", Uploader: discardUploader{}}}})
	require.ErrorContains(t, err, "no snapshot")
}

type discardUploader struct{}

func (discardUploader) Upload(_ context.Context, _ *Manifest, r io.Reader) error {
	_, err := io.Copy(io.Discard, r)
	return err
}

func (discardUploader) Commit(context.Context, *Manifest) error { return nil }

// TestSegmentCodecsConcurrent: the segment codecs of many followers encode
// at once on the shared compressors, and each segment decodes to exactly
// its own bytes: no compressor mixes two streams.
func TestSegmentCodecsConcurrent(t *testing.T) {
	for _, c := range []Compression{Zstd, Gzip, None} {
		t.Run(string(c), func(t *testing.T) {
			var wg sync.WaitGroup
			for g := range 16 {
				codec, err := newSegmentCodec("prod", &Pipeline{Compression: c})
				require.NoError(t, err)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 50 {
						raw := bytes.Repeat([]byte{byte(g), byte(i), byte(g * i)}, 100+(g*977+i*131)%20000)
						seg, err := codec.encode(raw, SegmentSummary{}, "chain", 1)
						if !assert.NoError(t, err) {
							return
						}
						dec, err := NewDecoder(bytes.NewReader(seg.stored), c)
						if !assert.NoError(t, err) {
							return
						}
						got, err := io.ReadAll(dec)
						_ = dec.Close()
						if !assert.NoError(t, err) || !assert.Equal(t, raw, got, "segment %d of codec %d", i, g) {
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// TestIdleSegmentBuilderHoldsNoBuffer: a follower's builder takes a pooled
// buffer with its first revision, not when it is made, so that an idle
// follower holds none (after a burst, each would keep up to
// maxPooledSegmentBuffer); its segments, empty or not, decode.
func TestIdleSegmentBuilderHoldsNoBuffer(t *testing.T) {
	for range 16 {
		buf := make([]byte, 0, 512<<10)
		segmentBuffers.Put(&buf)
	}
	b := newSegmentBuilder()
	require.Zero(t, b.buf.Cap(), "a builder with no revision holds no buffer")
	require.NoError(t, b.add(SegmentRevision{Revision: 5, Received: time.Unix(1, 0),
		Events: []SegmentEvent{{Key: []byte("/k"), Value: []byte("v"), ModRevision: 5, CreateRevision: 5, Version: 1}}}))
	sum, err := DecodeSegment(bytes.NewReader(b.finish()), func(*SegmentRevision) error { return nil })
	require.NoError(t, err)
	require.Equal(t, SegmentSummary{FirstRevision: 5, LastRevision: 5, Revisions: 1, Events: 1}, sum)
	b.release()

	sum, err = DecodeSegment(bytes.NewReader(newSegmentBuilder().finish()), func(*SegmentRevision) error { return nil })
	require.NoError(t, err)
	require.Zero(t, sum.Revisions)
}
