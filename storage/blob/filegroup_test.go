package blob

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitingFor returns how many waiters joined g's next round.
func (g *groupSync) waitingFor() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.next == nil {
		return 0
	}
	return g.next.waiting
}

// blockedGroup returns a groupSync whose first round blocks until release
// is closed, and the count of its rounds.
func blockedGroup() (g *groupSync, release chan struct{}, rounds *atomic.Int32) {
	release, rounds = make(chan struct{}), new(atomic.Int32)
	g = &groupSync{sync: func() error {
		if rounds.Add(1) == 1 {
			<-release
		}
		return nil
	}}
	return g, release, rounds
}

// TestGroupSyncJoinsWaiters: the waiters that arrive while a round runs
// share the next one, which begins after the last of them joined: ten
// waiters behind a blocked round take one round between them, not ten.
func TestGroupSyncJoinsWaiters(t *testing.T) {
	g, release, rounds := blockedGroup()
	first := make(chan error, 1)
	go func() { first <- g.wait(t.Context()) }()
	require.Eventually(t, func() bool { return rounds.Load() == 1 }, 10*time.Second, time.Millisecond, "the first round began")
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for range 10 {
		wg.Go(func() { errs <- g.wait(t.Context()) })
	}
	require.Eventually(t, func() bool { return g.waitingFor() == 10 }, 10*time.Second, time.Millisecond)
	select {
	case err := <-errs:
		t.Fatalf("a waiter returned before a round that began after it: %v", err)
	default:
	}
	close(release)
	require.NoError(t, <-first)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, int32(2), rounds.Load(), "rounds for eleven waiters")
	require.Eventually(t, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return !g.running
	}, 10*time.Second, time.Millisecond, "the goroutine that runs rounds ends when none waits")
}

// firstRoundFails returns a groupSync whose first round fails with err.
func firstRoundFails(err error) *groupSync {
	var calls atomic.Int32
	return &groupSync{sync: func() error {
		if calls.Add(1) == 1 {
			return err
		}
		return nil
	}}
}

// TestGroupSyncErrorFailsItsRound: a failed round fails each of its
// waiters, and the next round is tried afresh.
func TestGroupSyncErrorFailsItsRound(t *testing.T) {
	fail := errors.New("write-back error")
	g := firstRoundFails(fail)
	require.ErrorIs(t, g.wait(t.Context()), fail)
	require.NoError(t, g.wait(t.Context()))
}

// TestGroupSyncWaiterLeavesOnCancel: a waiter whose context ends stops
// waiting with the context's error; the round goes on for the others.
func TestGroupSyncWaiterLeavesOnCancel(t *testing.T) {
	g, release, rounds := blockedGroup()
	ctx, cancel := context.WithCancel(t.Context())
	left := make(chan error, 1)
	go func() { left <- g.wait(ctx) }()
	require.Eventually(t, func() bool { return rounds.Load() == 1 }, 10*time.Second, time.Millisecond)
	other := make(chan error, 1)
	go func() { other <- g.wait(t.Context()) }()
	cancel()
	require.ErrorIs(t, <-left, context.Canceled)
	close(release)
	require.NoError(t, <-other)
}

// TestGroupSyncFailedSince: a waiter whose own round succeeds still fails
// when a round failed since it marked, and one that marked after the
// failure does not.
func TestGroupSyncFailedSince(t *testing.T) {
	fail := errors.New("write-back error")
	g := firstRoundFails(fail)
	m := g.mark()
	require.ErrorIs(t, g.wait(t.Context()), fail, "another waiter's round")
	require.ErrorIs(t, g.waitChecked(t.Context(), m), fail, "marked before the failure")
	require.NoError(t, g.waitChecked(t.Context(), g.mark()), "marked after it")
}
