package schedule

import "time"

// Clock tells the scheduler the time and wakes it up. SystemClock is the
// real one; tests pass a manual clock so that they do not sleep through
// real minutes.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// At arranges for f to be called once the clock reads t or later (at
	// once if it already does), and returns a function that cancels the
	// call; stop reports whether it did. f must not block.
	At(t time.Time, f func()) (stop func() bool)
}

// SystemClock is the Clock of the operating system. The zero value is ready
// to use.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// At calls f through time.AfterFunc once t is reached.
func (SystemClock) At(t time.Time, f func()) func() bool {
	return time.AfterFunc(time.Until(t), f).Stop
}

var _ Clock = SystemClock{}
