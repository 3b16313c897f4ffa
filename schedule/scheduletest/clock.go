package scheduletest

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Clock is a manual clock: time stands still until the test moves it
// (Advance, Set, Jump), and the functions waiting for a time run when it
// is reached, in the goroutine that moved it. It satisfies schedule.Clock.
// It is safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	seq     uint64
	waiting []*waiter
	changed chan struct{} // closed and replaced whenever waiting changes
}

type waiter struct {
	at  time.Time
	seq uint64 // keeps waiters for the same time in the order they came
	f   func()
}

// NewClock returns a clock that reads now until it is moved.
func NewClock(now time.Time) *Clock {
	return &Clock{now: now, changed: make(chan struct{})}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// At calls f once the clock reads t or later: at once, in the caller's
// goroutine, when it already does; otherwise in the goroutine that moves
// the clock past t. The returned function cancels the call and reports
// whether it did.
func (c *Clock) At(t time.Time, f func()) func() bool {
	c.mu.Lock()
	if !t.After(c.now) {
		c.mu.Unlock()
		f()
		return func() bool { return false }
	}
	c.seq++
	w := &waiter{at: t, seq: c.seq, f: f}
	c.waiting = append(c.waiting, w)
	c.notifyLocked()
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.Index(c.waiting, w)
		if i < 0 {
			return false
		}
		c.waiting = slices.Delete(c.waiting, i, i+1)
		c.notifyLocked()
		return true
	}
}

// Advance moves the clock forward by d. See Set.
func (c *Clock) Advance(d time.Duration) {
	c.Set(c.Now().Add(d))
}

// Jump moves the clock to t at once, as a process paused until t finds
// it, then calls the functions waiting for a time up to t in the order of
// their times, each with the clock reading t. Unlike Set, no function sees
// a time between the clock's and t, so none can wait again for a time the
// jump passed.
func (c *Clock) Jump(t time.Time) {
	c.mu.Lock()
	if t.Before(c.now) {
		c.mu.Unlock()
		panic("scheduletest: time moved backwards")
	}
	c.now = t
	c.mu.Unlock()
	c.Set(t)
}

// Set moves the clock to t, which must not be before its time. The
// functions waiting for a time up to t are called in the order of their
// times, each with the clock reading its time, in the caller's goroutine.
func (c *Clock) Set(t time.Time) {
	for {
		c.mu.Lock()
		if t.Before(c.now) {
			c.mu.Unlock()
			panic("scheduletest: time moved backwards")
		}
		next := -1
		for i, w := range c.waiting {
			if w.at.After(t) {
				continue
			}
			if next < 0 || w.at.Before(c.waiting[next].at) || (w.at.Equal(c.waiting[next].at) && w.seq < c.waiting[next].seq) {
				next = i
			}
		}
		if next < 0 {
			c.now = t
			c.mu.Unlock()
			return
		}
		w := c.waiting[next]
		c.waiting = slices.Delete(c.waiting, next, next+1)
		if w.at.After(c.now) {
			c.now = w.at
		}
		c.notifyLocked()
		c.mu.Unlock()
		w.f()
	}
}

// Pending returns the number of functions waiting for a time.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting)
}

// Next returns the earliest time a function waits for, and false when none
// waits.
func (c *Clock) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Time
	for _, w := range c.waiting {
		if next.IsZero() || w.at.Before(next) {
			next = w.at
		}
	}
	return next, !next.IsZero()
}

// BlockUntil waits until at least n functions wait for a time, or ctx
// ends.
func (c *Clock) BlockUntil(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		ok, changed := len(c.waiting) >= n, c.changed
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *Clock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}
