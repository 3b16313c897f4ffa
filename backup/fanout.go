package backup

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"
)

// errAllBranchesFailed stops the source once no consumer is left.
var errAllBranchesFailed = errors.New("every destination failed")

// ErrDestinationStalled is matched by the error of a destination that took
// more than Pipeline.StallTimeout to take a chunk of the backup's stream:
// its upload is cancelled and the other destinations go on.
var ErrDestinationStalled = errors.New("destination stalled")

// fanout copies one stream to several consumers, each reading its own pipe.
// A write returns once every live consumer has taken the bytes, so the
// slowest consumer sets the pace (back-pressure) and nothing is buffered
// here. A consumer that fails is dropped; the others go on.
type fanout struct {
	branches []*branch
	stall    time.Duration // a consumer slower than this is dropped; 0: never
}

// branch is one consumer: it reads r and reports its outcome with done.
type branch struct {
	r    *io.PipeReader
	w    *io.PipeWriter
	once sync.Once
	err  error // why the branch was dropped; set before done is called
	dead bool  // written by the fanout's writer only
	// cancel ends the consumer's context; nil when it has none.
	cancel context.CancelCauseFunc
}

func newFanout(n int, stall time.Duration) *fanout {
	f := &fanout{branches: make([]*branch, n), stall: stall}
	for i := range f.branches {
		r, w := io.Pipe()
		f.branches[i] = &branch{r: r, w: w}
	}
	return f
}

// done is called by the consumer when it stops reading, with its error or
// nil. A consumer that stops early makes further writes to it fail, so it
// is dropped instead of blocking the others.
func (b *branch) done(err error) {
	if err == nil {
		err = io.ErrClosedPipe
	}
	b.r.CloseWithError(err)
}

// Write implements io.Writer.
func (f *fanout) Write(p []byte) (int, error) {
	alive := 0
	for _, b := range f.branches {
		if b.dead {
			continue
		}
		if _, err := f.write(b, p); err != nil {
			b.dead, b.err = true, err
			continue
		}
		alive++
	}
	if alive == 0 {
		return 0, errAllBranchesFailed
	}
	return len(p), nil
}

// write writes p to b, dropping b with ErrDestinationStalled (its reader
// and its consumer's context end) when it does not take p within f.stall.
func (f *fanout) write(b *branch, p []byte) (int, error) {
	if f.stall <= 0 {
		return b.w.Write(p)
	}
	t := time.AfterFunc(f.stall, func() {
		if b.cancel != nil {
			b.cancel(ErrDestinationStalled)
		}
		b.r.CloseWithError(ErrDestinationStalled)
	})
	defer t.Stop()
	return b.w.Write(p)
}

// close ends every live branch's stream: with io.EOF when err is nil (the
// consumer may commit), or with err (the consumer must abort).
func (f *fanout) close(err error) {
	for _, b := range f.branches {
		b.once.Do(func() { b.w.CloseWithError(err) })
	}
}
