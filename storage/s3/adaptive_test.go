package s3_test

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/faultproxy"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// By default every part but the last is PartSize bytes, however slow the
// store (stores such as R2 and Garage refuse parts of several sizes); with
// AdaptiveParts a store slow to answer gets more, smaller parts in flight
// within the same budget. Neither holds more bytes than the budget: MinIO
// behind a proxy that holds every part request, a reader of a backup's
// pace, the CLI's 16 MiB of parts (8 MiB x 2).
func TestAdaptivePartsUnderLatency(t *testing.T) {
	srv := miniotest.Start(t)
	const (
		budget = 16 * mib
		size   = 40*mib + 5
		pace   = 32 * mib // bytes per second the reader yields
		// A delay several times a part's fill time, so that the reader
		// outpaces the store however busy the machine.
		delay = 800 * time.Millisecond
	)
	run := func(t *testing.T, delay time.Duration, adaptive bool) *partFlight {
		proxy := faultproxy.StartHTTP(t, srv.Endpoint())
		if delay > 0 {
			proxy.SetRules(faultproxy.Rule{Name: "rtt", Match: faultproxy.IsUploadPart(0), Action: faultproxy.Delay, Delay: delay})
		}
		flight := &partFlight{}
		var peakMapped int64
		var mu sync.Mutex
		b, _ := newBucket(t, srv, false, func(o *s3.Options) {
			o.Endpoint = proxy.Addr()
			o.PartSize, o.PartsInFlight = s3.PartsWithin(budget)
			o.AdaptiveParts = adaptive
			o.Transport = flight.transport(newBaseTransport(t))
		})
		s3.OnPartBufferMap(b, func(held int64) {
			mu.Lock()
			peakMapped = max(peakMapped, held)
			mu.Unlock()
		})
		start := time.Now()
		require.NoError(t, b.Put(testCtx(t), "k", &pacedReader{r: stream(7, size), rate: pace, start: time.Now()}, nil))
		t.Logf("delay %v adaptive %t: %v, %d parts, at most %d in flight holding %d MiB, %d MiB of buffers mapped",
			delay, adaptive, time.Since(start).Round(time.Millisecond), flight.parts, flight.maxParts, flight.maxBytes/mib, peakMapped/mib)
		assert.LessOrEqual(t, flight.maxBytes, int64(budget), "bytes of parts in flight")
		assert.LessOrEqual(t, peakMapped, int64(budget), "bytes of part buffers")
		requireContent(t, b, "k", 7, size)
		return flight
	}
	t.Run("default", func(t *testing.T) {
		f := run(t, delay, false)
		assert.LessOrEqual(t, f.maxParts, 2)
		want := []int64{8 * mib, 8 * mib, 8 * mib, 8 * mib, 8 * mib, 5}
		assert.Equal(t, want, f.sizes(), "part sizes by part number")
	})
	t.Run("adaptive", func(t *testing.T) {
		f := run(t, delay, true)
		assert.GreaterOrEqual(t, f.maxParts, 3, "parts in flight at 800 ms")
		assert.Greater(t, f.parts, 6, "smaller parts than 8 MiB")
	})
	t.Run("adaptive-loopback", func(t *testing.T) {
		run(t, 0, true) // logged only: its pace depends on the machine's load
	})
}

// partFlight records the part requests in flight and their bytes.
type partFlight struct {
	mu       sync.Mutex
	inFlight int
	bytes    int64
	parts    int
	maxParts int
	maxBytes int64
	size     map[int]int64 // bytes by part number
}

// sizes returns the bytes of each part, by part number.
func (f *partFlight) sizes() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]int64, len(f.size))
	for num, n := range f.size {
		if num >= 1 && num <= len(out) {
			out[num-1] = n
		}
	}
	return out
}

func (f *partFlight) transport(base http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if requestKind(req) != "part" {
			return base.RoundTrip(req)
		}
		num, _ := strconv.Atoi(req.URL.Query().Get("partNumber"))
		f.mu.Lock()
		if f.size == nil {
			f.size = map[int]int64{}
		}
		f.size[num] = req.ContentLength
		f.parts++
		f.inFlight++
		f.bytes += req.ContentLength
		f.maxParts = max(f.maxParts, f.inFlight)
		f.maxBytes = max(f.maxBytes, f.bytes)
		f.mu.Unlock()
		defer func() {
			f.mu.Lock()
			f.inFlight--
			f.bytes -= req.ContentLength
			f.mu.Unlock()
		}()
		return base.RoundTrip(req)
	})
}

// pacedReader yields r at rate bytes per second at most, as an etcd
// snapshot through a compressor does: it is the source's pace, not a
// synchronisation.
type pacedReader struct {
	r     io.Reader
	rate  int64
	start time.Time
	n     int64
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if len(b) > 256<<10 {
		b = b[:256<<10]
	}
	if due := p.start.Add(time.Duration(p.n * int64(time.Second) / p.rate)); time.Until(due) > 0 {
		time.Sleep(time.Until(due))
	}
	n, err := p.r.Read(b)
	p.n += int64(n)
	return n, err
}

// A part retried after a reset connection or a 500 resends its own bytes
// from its buffer, in both settings; with AdaptiveParts the buffers of
// other sizes are unmapped and mapped again around those retries while
// parts are in flight, and the object is still the stream.
func TestPartRetriesAcrossBufferSizes(t *testing.T) {
	srv := miniotest.Start(t)
	const size = 40*mib + 5
	for _, adaptive := range []bool{false, true} {
		t.Run(fmt.Sprintf("adaptive=%t", adaptive), func(t *testing.T) {
			proxy := faultproxy.StartHTTP(t, srv.Endpoint())
			proxy.SetRules(
				faultproxy.Rule{Name: "reset", Match: faultproxy.IsUploadPart(3), Action: faultproxy.ResetAfter, Bytes: mib, Times: 1},
				faultproxy.Rule{Name: "500", Match: faultproxy.IsUploadPart(5), Action: faultproxy.InternalError, Times: 1},
				faultproxy.Rule{Name: "rtt", Match: faultproxy.IsUploadPart(0), Action: faultproxy.Delay, Delay: 800 * time.Millisecond},
			)
			flight := &partFlight{}
			var peak atomic.Int64
			b, _ := newBucket(t, srv, false, func(o *s3.Options) {
				o.Endpoint = proxy.Addr()
				o.PartSize, o.PartsInFlight, o.AdaptiveParts = 8*mib, 2, adaptive
				o.Transport = flight.transport(newBaseTransport(t))
			})
			s3.OnPartBufferMap(b, func(held int64) {
				for p := peak.Load(); held > p && !peak.CompareAndSwap(p, held); p = peak.Load() {
				}
			})
			require.NoError(t, b.Put(testCtx(t), "k", &pacedReader{r: stream(9, size), rate: 32 * mib, start: time.Now()}, nil))
			requireContent(t, b, "k", 9, size)
			fired := proxy.Fired()
			assert.Equal(t, 1, fired["reset"], "part 3 reset")
			assert.Equal(t, 1, fired["500"], "part 5 answered 500")
			assert.LessOrEqual(t, peak.Load(), int64(16*mib), "bytes of part buffers")
			sizes := flight.sizes()
			t.Logf("part sizes %v", sizes)
			distinct := map[int64]bool{}
			for _, n := range sizes[:len(sizes)-1] {
				distinct[n] = true
			}
			if adaptive {
				assert.Greater(t, len(distinct), 1, "parts of several sizes")
			} else {
				assert.Equal(t, map[int64]bool{8 * mib: true}, distinct, "every part but the last is PartSize")
			}
		})
	}
}
