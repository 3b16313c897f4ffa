package s3

import (
	"math"
	"sync"
	"time"
)

// partSizer chooses the size of each part of one multipart upload within
// a budget of part-buffer bytes (Options.PartSize x PartsInFlight). Unless
// Options.AdaptiveParts is set, every part is PartSize bytes.
//
// While the reader fills one buffer, the others upload; the reader keeps
// going as long as a part's upload takes no longer than filling the parts
// that follow it while it is in flight. The ratio of the two times, upload
// over fill, is how many parts must be in flight to keep up: about 1 on a
// store next door, several on one 100 ms away, where each part waits a
// round trip or more whatever its size. So the sizer measures both times
// of every part (their ratio barely depends on the part size: both grow
// with it) and sizes the parts that follow so that the budget holds that
// many uploads, with some headroom, beside the one filling: smaller parts
// where the store is slow to answer, larger and fewer where it is fast,
// never more bytes than the budget.
//
// Whatever it measures, every stream up to limit bytes (MaxParts x
// PartSize, Put's promise) still fits in maxParts parts: a part is never
// smaller than what the remaining part numbers need at the largest size
// the budget allows (the whole budget, one part at a time), nor than
// MinPartSize.
type partSizer struct {
	budget   int64 // bytes of part buffers
	first    int64 // the configured PartSize: the first part and those before any measure
	limit    int64 // largest stream to fit: maxParts x first
	maxParts int
	fixed    bool // every part is first bytes

	mu    sync.Mutex
	ratio float64 // smoothed upload time over fill time; 0 before a measure
}

// Tuning of partSizer.
const (
	// sizerHeadroom multiplies the measured ratio: uploads vary, and a
	// reader that waits for a buffer loses time no later part returns.
	sizerHeadroom = 1.25
	// sizerSmoothing is the weight of a new measure in the ratio.
	sizerSmoothing = 0.3
	// sizerStep rounds part sizes down to whole MiB.
	sizerStep = 1 << 20
)

func newPartSizer(o Options, maxParts int) *partSizer {
	return &partSizer{
		budget:   o.PartSize * int64(o.PartsInFlight),
		first:    o.PartSize,
		limit:    int64(maxParts) * o.PartSize,
		maxParts: maxParts,
		fixed:    !o.AdaptiveParts || o.PartsInFlight < 2,
	}
}

// observe records a part's times: fill, the reader's time to fill it
// (waits for a free buffer excluded), and upload, its request's.
func (z *partSizer) observe(fill, upload time.Duration) {
	if fill <= 0 {
		fill = time.Microsecond
	}
	r := float64(upload) / float64(fill)
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.ratio == 0 {
		z.ratio = r
		return
	}
	z.ratio += sizerSmoothing * (r - z.ratio)
}

// next returns the size of part num (from 1), which follows written bytes
// in the parts before it.
func (z *partSizer) next(num int, written int64) int64 {
	if z.fixed || num == 1 {
		return z.first
	}
	z.mu.Lock()
	ratio := z.ratio
	z.mu.Unlock()
	size := z.first
	if ratio > 0 {
		size = z.sizeFor(ratio)
	}
	// The cap matters only past the last part number, where the part is
	// read to learn that the stream is too large and never sent.
	return min(max(size, z.floor(num, written)), z.largest())
}

// largest is the largest part the budget holds.
func (z *partSizer) largest() int64 { return max(min(z.budget, MaxPartSize), z.first) }

// sizeFor returns the part size that leaves room in the budget for
// ratio x headroom uploads beside the buffer being filled.
func (z *partSizer) sizeFor(ratio float64) int64 {
	uploads := math.Ceil(min(ratio*sizerHeadroom, float64(z.budget/MinPartSize)))
	buffers := int64(max(uploads, 1)) + 1
	size := z.budget / buffers / sizerStep * sizerStep
	return min(max(size, MinPartSize), MaxPartSize)
}

// floor is the least size of part num after written bytes: what keeps a
// stream of limit bytes within maxParts parts of at most the budget each.
func (z *partSizer) floor(num int, written int64) int64 {
	need := z.limit - written - int64(z.maxParts-num)*z.largest()
	return max(need, MinPartSize)
}
