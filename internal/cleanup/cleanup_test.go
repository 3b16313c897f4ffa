package cleanup

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestContext: a cleanup context outlives its parent's cancellation, keeps
// its values, and ends with the first of its bounds that ends, also one
// that ended before it was made.
func TestContext(t *testing.T) {
	type key struct{}
	errOuter, errInner := errors.New("outer"), errors.New("inner")
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	outer, endOuter := Bound(parent)
	inner, endInner := Bound(outer)
	defer endOuter(nil)
	defer endInner(nil)
	cancel()

	c, stop := Context(inner, time.Minute)
	defer stop()
	if c.Err() != nil || c.Value(key{}) != "v" {
		t.Fatalf("cleanup context: err %v, value %v", c.Err(), c.Value(key{}))
	}
	endOuter(errOuter)
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the outer bound did not end the cleanup")
	}
	if !errors.Is(context.Cause(c), errOuter) || !errors.Is(Ended(inner), errOuter) {
		t.Fatalf("cause %v, ended %v", context.Cause(c), Ended(inner))
	}
	endInner(errInner)
	late, stopLate := Context(inner, time.Minute)
	defer stopLate()
	if late.Err() == nil {
		t.Fatal("a cleanup context made after its bound ended is live")
	}
	if Ended(parent) != nil {
		t.Fatal("a context without a bound has ended")
	}
	free, stopFree := Context(parent, time.Minute)
	defer stopFree()
	if free.Err() != nil {
		t.Fatal("a cleanup context without a bound ended with its parent")
	}
}
