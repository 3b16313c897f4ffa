package scheduletest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClock(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewClock(t0)
	assert.Equal(t, t0, c.Now())

	var fired []string
	at := func(name string, d time.Duration) func() bool {
		return c.At(t0.Add(d), func() {
			fired = append(fired, name+"@"+c.Now().Sub(t0).String())
		})
	}
	at("now", 0)
	assert.Equal(t, []string{"now@0s"}, fired, "a time already reached fires at once")
	at("b", 2*time.Minute)
	at("a", time.Minute)
	at("b2", 2*time.Minute)
	stopC := at("c", 3*time.Minute)
	at("late", time.Hour)
	assert.Equal(t, 5, c.Pending())
	next, ok := c.Next()
	assert.True(t, ok)
	assert.Equal(t, t0.Add(time.Minute), next)

	assert.True(t, stopC())
	assert.False(t, stopC(), "stopped once")
	c.Advance(5 * time.Minute)
	assert.Equal(t, []string{"now@0s", "a@1m0s", "b@2m0s", "b2@2m0s"}, fired, "in time order, the clock reading each time")
	assert.Equal(t, t0.Add(5*time.Minute), c.Now())
	assert.Equal(t, 1, c.Pending())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, c.BlockUntil(ctx, 2), context.DeadlineExceeded)
	done := make(chan error)
	go func() { done <- c.BlockUntil(context.Background(), 2) }()
	at("more", 2*time.Hour)
	require.NoError(t, <-done)

	assert.Panics(t, func() { c.Set(t0) })
}

func TestJump(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewClock(t0)
	var fired []string
	var again func()
	again = func() { // waits again for a minute later, as a ticker does
		fired = append(fired, c.Now().Sub(t0).String())
		c.At(c.Now().Add(time.Minute), again)
	}
	c.At(t0.Add(time.Minute), again)
	c.Jump(t0.Add(5 * time.Minute))
	assert.Equal(t, []string{"5m0s"}, fired, "one call, reading the time jumped to")
	next, _ := c.Next()
	assert.Equal(t, t0.Add(6*time.Minute), next)
	assert.Panics(t, func() { c.Jump(t0) })

	c.Set(t0.Add(8 * time.Minute))
	assert.Equal(t, []string{"5m0s", "6m0s", "7m0s", "8m0s"}, fired, "Set calls it at every time it passes")
}
