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

// TestPublish: a PublishBound ends the cleanup contexts of Publish only;
// a Bound ends both kinds, and Ended reports either.
func TestPublish(t *testing.T) {
	errLost, errSpent := errors.New("lost"), errors.New("spent")
	budget, endBudget := Bound(context.Background())
	defer endBudget(nil)
	held, endHeld := PublishBound(budget)
	defer endHeld(nil)

	pub, stopPub := Publish(held, time.Minute)
	defer stopPub()
	own, stopOwn := Context(held, time.Minute)
	defer stopOwn()
	endHeld(errLost)
	select {
	case <-pub.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the publish bound did not end the publishing cleanup")
	}
	if !errors.Is(context.Cause(pub), errLost) || !errors.Is(Ended(held), errLost) {
		t.Fatalf("cause %v, ended %v", context.Cause(pub), Ended(held))
	}
	if own.Err() != nil {
		t.Fatal("the publish bound ended a cleanup that publishes nothing")
	}
	late, stopLate := Publish(held, time.Minute)
	defer stopLate()
	if late.Err() == nil {
		t.Fatal("a publishing cleanup made after its bound ended is live")
	}
	endBudget(errSpent)
	select {
	case <-own.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the budget bound did not end the cleanup")
	}
	if !errors.Is(context.Cause(own), errSpent) {
		t.Fatalf("cause %v", context.Cause(own))
	}
}
