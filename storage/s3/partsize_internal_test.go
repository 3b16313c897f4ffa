package s3

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testMiB = 1 << 20

// The parts that follow the measures: a store slow to answer gets smaller
// parts, more of them within the budget; one that keeps up gets larger,
// fewer ones; the budget holds every choice.
func TestPartSizerFollowsThePace(t *testing.T) {
	cases := []struct {
		name         string
		size, flight int64
		fill, upload time.Duration
		want         int64
	}{
		// The CLI's 16 MiB of parts: 8 MiB x 2.
		{"cli, store keeps up", 8 * testMiB, 2, 100 * time.Millisecond, 60 * time.Millisecond, 8 * testMiB},
		{"cli, store 100 ms away", 8 * testMiB, 2, 60 * time.Millisecond, 260 * time.Millisecond, 5 * testMiB},
		{"cli, store just behind", 8 * testMiB, 2, 100 * time.Millisecond, 110 * time.Millisecond, 5 * testMiB},
		// The library's default 32 MiB: 8 MiB x 4.
		{"default, store keeps up", 8 * testMiB, 4, 100 * time.Millisecond, 50 * time.Millisecond, 16 * testMiB},
		{"default, twice as slow", 8 * testMiB, 4, 100 * time.Millisecond, 200 * time.Millisecond, 8 * testMiB},
		{"default, far away", 8 * testMiB, 4, 20 * time.Millisecond, 300 * time.Millisecond, 5 * testMiB},
		{"64 MiB, far away", 8 * testMiB, 8, 50 * time.Millisecond, 300 * time.Millisecond, 7 * testMiB},
		{"reader stalled", 8 * testMiB, 4, 0, 300 * time.Millisecond, 5 * testMiB},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			z := newPartSizer(Options{PartSize: c.size, PartsInFlight: int(c.flight), AdaptiveParts: true}, MaxParts)
			assert.Equal(t, c.size, z.next(2, c.size), "before a measure")
			for range 20 {
				z.observe(c.fill, c.upload)
			}
			got := z.next(10, 10*c.size)
			assert.Equal(t, c.want, got, "part size, MiB %d", got/testMiB)
			assert.LessOrEqual(t, 2*got, z.budget, "at least two buffers")
			assert.Equal(t, c.size, z.next(1, 0), "the first part is always PartSize")
		})
	}
}

// Parts are PartSize bytes by default, and with AdaptiveParts when one
// buffer leaves nothing to size.
func TestPartSizerFixed(t *testing.T) {
	for _, o := range []Options{
		{PartSize: 8 * testMiB, PartsInFlight: 2},
		{PartSize: 8 * testMiB, PartsInFlight: 4},
		{PartSize: 8 * testMiB, PartsInFlight: 1, AdaptiveParts: true},
	} {
		z := newPartSizer(o, MaxParts)
		z.observe(time.Millisecond, time.Second)
		assert.Equal(t, int64(8*testMiB), z.next(5, 32*testMiB), "%+v", o)
	}
}

// Smoothing: one slow part does not take the parts of a store that keeps
// up to the smallest, a lasting change moves them within a few parts.
func TestPartSizerSmooths(t *testing.T) {
	z := newPartSizer(Options{PartSize: 8 * testMiB, PartsInFlight: 4, AdaptiveParts: true}, MaxParts)
	for range 10 {
		z.observe(100*time.Millisecond, 50*time.Millisecond)
	}
	z.observe(100*time.Millisecond, 200*time.Millisecond)
	assert.Equal(t, int64(10*testMiB), z.next(12, 0))
	for range 5 {
		z.observe(10*time.Millisecond, 300*time.Millisecond)
	}
	assert.Equal(t, int64(5*testMiB), z.next(18, 0))
}

// Whatever the measures say, every stream up to MaxParts x PartSize fits:
// simulate a store that is slow for the first parts (the smallest parts)
// then of any pace, over a stream of the promised size, in parts of what
// the sizer gives; the part count must stay within the limit, and no
// part may exceed the budget.
func TestPartSizerKeepsThePromise(t *testing.T) {
	for _, c := range []struct {
		size     int64
		flight   int
		maxParts int
	}{
		{8 * testMiB, 2, MaxParts}, // the CLI: 78.1 GiB
		{8 * testMiB, 4, MaxParts}, // the library's default
		{5 * testMiB, 3, MaxParts},
		{5 * testMiB, 2, 50},
	} {
		for _, slowFor := range []int{0, 100, 5000, MaxParts} {
			t.Run(fmt.Sprintf("%dMiBx%d/%d/slow%d", c.size/testMiB, c.flight, c.maxParts, slowFor), func(t *testing.T) {
				z := newPartSizer(Options{PartSize: c.size, PartsInFlight: c.flight, AdaptiveParts: true}, c.maxParts)
				total := int64(c.maxParts) * c.size
				var written int64
				num := 0
				for written < total {
					num++
					require.LessOrEqual(t, num, c.maxParts, "part %d after %d of %d bytes", num, written, total)
					p := z.next(num, written)
					require.LessOrEqual(t, p, z.budget)
					require.GreaterOrEqual(t, p, MinPartSize)
					written += min(p, total-written)
					if num < slowFor {
						z.observe(time.Millisecond, time.Second) // smallest parts
					} else {
						z.observe(time.Second, time.Millisecond)
					}
				}
			})
		}
	}
}

// Past the last part number (a stream larger than the promise), the
// part read to find out stays within the budget.
func TestPartSizerPastTheLastPart(t *testing.T) {
	z := newPartSizer(Options{PartSize: 5 * testMiB, PartsInFlight: 2, AdaptiveParts: true}, 3)
	assert.Equal(t, int64(10*testMiB), z.next(4, 5*testMiB))
	z = newPartSizer(Options{PartSize: 5 * testMiB, PartsInFlight: 1, AdaptiveParts: true}, 3)
	assert.Equal(t, int64(5*testMiB), z.next(4, 5*testMiB))
}

// The pool never holds more bytes than its budget, and the number of
// buffers follows the size asked.
func TestPartPoolBudget(t *testing.T) {
	ctx := context.Background()
	var peak int64
	p := newPartPool(16*testMiB, func(held int64) { peak = max(peak, held) })
	defer p.release()

	a, err := p.get(ctx, 8*testMiB)
	require.NoError(t, err)
	b, err := p.get(ctx, 8*testMiB)
	require.NoError(t, err)
	p.put(a)
	// 5 MiB parts: the free 8 MiB one is unmapped, a second 5 MiB must
	// wait for b.
	c, err := p.get(ctx, 5*testMiB)
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = p.get(short, 5*testMiB)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	p.put(b)
	d, err := p.get(ctx, 5*testMiB)
	require.NoError(t, err)
	e, err := p.get(ctx, 5*testMiB)
	require.NoError(t, err, "three 5 MiB buffers fit in 16 MiB")
	for _, buf := range []*[]byte{c, d, e} {
		assert.Len(t, *buf, 5*testMiB)
	}
	assert.LessOrEqual(t, peak, int64(16*testMiB))
	p.put(c)
	p.put(d)
	p.put(e)
}
