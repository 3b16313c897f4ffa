package s3_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// BenchmarkPutUnknownSize streams 1 GiB of unknown length through Put to
// MinIO with the default options and fails if the heap grows by more than
// PartsInFlight x PartSize + 16 MiB over its level before the upload.
//
// The heap is sampled every 5 ms from runtime/metrics (objects, live and
// not yet collected), which stops no goroutine.
func BenchmarkPutUnknownSize(b *testing.B) {
	const (
		size  = 1 << 30
		slack = 16 << 20
		limit = s3.DefaultPartsInFlight*s3.DefaultPartSize + slack
	)
	srv := miniotest.Start(b)
	bucket, name := newBucket(b, srv, false, nil)
	ctx := context.Background()

	var peakGrowth uint64
	var elapsed time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		key := fmt.Sprintf("bench/%d", i)
		runtime.GC()
		runtime.GC() // the second empties sync.Pool's victim cache too
		sampler := newHeapSampler(5 * time.Millisecond)
		b.StartTimer()

		start := time.Now()
		err := bucket.Put(ctx, key, stream(int64(i), size), nil)
		took := time.Since(start)

		b.StopTimer()
		growth := sampler.stop()
		if err != nil {
			b.Fatalf("put: %v", err)
		}
		elapsed += took
		peakGrowth = max(peakGrowth, growth)
		info, err := bucket.Stat(ctx, key)
		if err != nil || info.Size != size {
			b.Fatalf("stat: size %d, %v", info.Size, err)
		}
		if err := bucket.Delete(ctx, key); err != nil {
			b.Fatalf("delete: %v", err)
		}
		b.StartTimer()
	}
	b.StopTimer()

	uploads, err := srv.IncompleteUploads(ctx, name)
	if err != nil || len(uploads) > 0 {
		b.Fatalf("incomplete uploads: %v, %v", uploads, err)
	}
	b.ReportMetric(float64(peakGrowth)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(size)*float64(b.N)/1e6/elapsed.Seconds(), "MB/s")
	if peakGrowth > uint64(limit) {
		b.Fatalf("peak heap growth %.1f MiB exceeds %d x %d MiB + %d MiB",
			float64(peakGrowth)/(1<<20), s3.DefaultPartsInFlight, s3.DefaultPartSize>>20, slack>>20)
	}
}

// heapSampler records the highest heap level above the level at its start.
type heapSampler struct {
	done chan struct{}
	wg   sync.WaitGroup
	base uint64
	peak uint64
}

const heapMetric = "/memory/classes/heap/objects:bytes"

func readHeap() uint64 {
	s := []metrics.Sample{{Name: heapMetric}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func newHeapSampler(every time.Duration) *heapSampler {
	h := &heapSampler{done: make(chan struct{}), base: readHeap()}
	h.peak = h.base
	h.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-h.done:
				return
			case <-t.C:
				h.peak = max(h.peak, readHeap())
			}
		}
	})
	return h
}

// stop ends sampling and returns the peak growth in bytes.
func (h *heapSampler) stop() uint64 {
	close(h.done)
	h.wg.Wait()
	h.peak = max(h.peak, readHeap())
	if h.peak < h.base {
		return 0
	}
	return h.peak - h.base
}
