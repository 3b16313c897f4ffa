package schedule

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// followingRunner is a ContinuousRunner whose Follow follows until its
// context ends.
type followingRunner struct{ *recorder }

func (f *followingRunner) Follow(ctx context.Context, job Job, started func()) error {
	started()
	<-ctx.Done()
	return nil
}

// TestFollowAdmittedBesideOtherDestinationsQueue: while runs wait for a
// busy destination, a continuous backup that writes elsewhere starts at
// once instead of waiting for that queue to drain.
func TestFollowAdmittedBesideOtherDestinationsQueue(t *testing.T) {
	noLeaks(t)
	fr := &followingRunner{}
	h := newHarness(t, utc("2026-01-01T00:30:00Z"), Config{Runner: fr, MaxPerDestination: 1})
	fr.recorder = h.rec
	release := make(chan struct{})
	free := sync.OnceFunc(func() { close(release) })
	h.rec.setHook(func(ctx context.Context, _ Job, _ time.Time) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	for _, id := range []string{"ns/a", "ns/b"} {
		j := job(id, "@hourly")
		j.Destinations = []string{"busy"}
		require.NoError(t, h.s.Set(j))
	}
	h.start()
	t.Cleanup(free) // before the harness stops the scheduler, if a check fails
	h.clk.Set(utc("2026-01-01T01:00:00Z"))
	eventually(t, func() bool {
		return h.status("ns/a").Running != h.status("ns/b").Running && (h.status("ns/a").Queued || h.status("ns/b").Queued)
	}, "one run in flight on the busy destination, the other queued")

	c := job("ns/c", "@daily")
	c.Destinations = []string{"elsewhere"}
	c.Continuous = &Continuous{Window: time.Hour}
	require.NoError(t, h.s.Set(c))
	eventually(t, func() bool { return h.status("ns/c").Following }, "the continuous backup follows while the other destination's queue waits")

	free()
	h.settle()
	require.NoError(t, h.stop())
}

// gatedFollowRunner is a ContinuousRunner whose first Follow holds its run
// slot (does not call started) until gate is closed; the others start at
// once.
type gatedFollowRunner struct {
	*recorder
	gate  chan struct{}
	mu    sync.Mutex
	calls int
}

func (f *gatedFollowRunner) Follow(ctx context.Context, job Job, started func()) error {
	f.mu.Lock()
	f.calls++
	first := f.calls == 1
	f.mu.Unlock()
	if first {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return nil
		}
	}
	started()
	<-ctx.Done()
	return nil
}

// TestFollowStartsWhenASlotFrees: a continuous backup waiting for a run
// slot starts as soon as one frees, not at its next retry on the clock
// (before, with one slot, a scheduler started one follower per admitRetry
// whatever the time each start took).
func TestFollowStartsWhenASlotFrees(t *testing.T) {
	noLeaks(t)
	fr := &gatedFollowRunner{gate: make(chan struct{})}
	h := newHarness(t, utc("2026-01-01T00:30:00Z"), Config{Runner: fr, MaxConcurrent: 1})
	fr.recorder = h.rec
	h.start()
	for _, id := range []string{"ns/a", "ns/b"} {
		j := job(id, "@daily")
		j.Continuous = &Continuous{Window: time.Hour}
		require.NoError(t, h.s.Set(j))
	}
	eventually(t, func() bool {
		fr.mu.Lock()
		defer fr.mu.Unlock()
		return fr.calls == 1
	}, "one continuous backup starting in the only slot")
	close(fr.gate)
	// The clock stands still: only the freed slot can let the other in.
	eventually(t, func() bool { return h.status("ns/a").Following && h.status("ns/b").Following },
		"both continuous backups follow once the first freed its slot")
	require.NoError(t, h.stop())
}

// TestFreedSlotGoesToTheQueuedRunFirst: when a run slot frees, a run
// queued for it (here a one-shot backup to another destination, waiting
// for the scheduler-wide limit) takes it before the continuous backups
// woken by the same release: they do not starve it while they start one
// after another.
func TestFreedSlotGoesToTheQueuedRunFirst(t *testing.T) {
	noLeaks(t)
	fr := &gatedFollowRunner{gate: make(chan struct{})}
	h := newHarness(t, utc("2026-01-01T00:30:00Z"), Config{Runner: fr, MaxConcurrent: 1})
	fr.recorder = h.rec
	followersAtBackup := -1
	h.rec.setHook(func(context.Context, Job, time.Time) error {
		fr.mu.Lock()
		followersAtBackup = fr.calls
		fr.mu.Unlock()
		return nil
	})
	h.start()
	const followers = 8
	j := job("ns/f0", "@daily")
	j.Continuous = &Continuous{Window: time.Hour}
	require.NoError(t, h.s.Set(j))
	eventually(t, func() bool { fr.mu.Lock(); defer fr.mu.Unlock(); return fr.calls == 1 }, "the first continuous backup holds the only slot")
	for i := 1; i < followers; i++ {
		j := job(fmt.Sprintf("ns/f%d", i), "@daily")
		j.Continuous = &Continuous{Window: time.Hour}
		require.NoError(t, h.s.Set(j))
	}
	one := Job{ID: "ns/one-shot", Cluster: "ns", Name: "one-shot", Destinations: []string{"other"}}
	require.NoError(t, h.s.Set(one))
	eventually(t, func() bool { return h.status("ns/one-shot").Queued }, "the one-shot backup queued for the slot")

	close(fr.gate)
	eventually(t, func() bool { return len(h.rec.callsOf("ns/one-shot")) == 1 }, "the one-shot backup runs")
	h.rec.mu.Lock()
	got := followersAtBackup
	h.rec.mu.Unlock()
	require.Equal(t, 1, got, "the one-shot backup took the freed slot before the waiting continuous backups")
	eventually(t, func() bool {
		for i := range followers {
			if !h.status(fmt.Sprintf("ns/f%d", i)).Following {
				return false
			}
		}
		return true
	}, "every continuous backup follows in the end")
	require.NoError(t, h.stop())
}

// cancelledFollowRunner is a gatedFollowRunner that counts the Follow
// calls whose context had already ended.
type cancelledFollowRunner struct {
	gatedFollowRunner
	cancelled atomic.Int32
}

func (f *cancelledFollowRunner) Follow(ctx context.Context, job Job, started func()) error {
	if ctx.Err() != nil {
		f.cancelled.Add(1)
	}
	return f.gatedFollowRunner.Follow(ctx, job, started)
}

// TestRemovedFollowerTakesNoSlot: continuous backups removed while a slot
// frees do not take it: a follower woken by the release whose job was
// removed before it got the slot ends instead of starting. The slot is
// freed once every removal has taken its job out and cancelled its
// follower (one step, under the scheduler's lock): a follower still
// waiting then (most have ended already) must not take it. Freed before,
// the test would count followers removed after they took the slot, no
// fault of the scheduler.
func TestRemovedFollowerTakesNoSlot(t *testing.T) {
	noLeaks(t)
	fr := &cancelledFollowRunner{gatedFollowRunner: gatedFollowRunner{gate: make(chan struct{})}}
	h := newHarness(t, utc("2026-01-01T00:30:00Z"), Config{Runner: fr, MaxConcurrent: 1})
	fr.recorder = h.rec
	h.start()
	const followers = 40
	for i := range followers {
		j := job(fmt.Sprintf("ns/f%d", i), "@daily")
		j.Continuous = &Continuous{Window: time.Hour}
		require.NoError(t, h.s.Set(j))
		if i == 0 {
			eventually(t, func() bool { fr.mu.Lock(); defer fr.mu.Unlock(); return fr.calls == 1 }, "the first continuous backup holds the only slot")
		}
	}
	var wg sync.WaitGroup
	for i := 1; i < followers; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); assert.NoError(t, h.s.Remove(t.Context(), fmt.Sprintf("ns/f%d", i))) }()
	}
	eventually(t, func() bool { h.s.mu.Lock(); defer h.s.mu.Unlock(); return len(h.s.jobs) == 1 }, "the removals took their jobs out")
	close(fr.gate)
	wg.Wait()
	require.Zero(t, fr.cancelled.Load(), "Follow calls for continuous backups already removed")
	require.NoError(t, h.stop())
}

// TestAdmitCancelledTakesNoSlot: a follower whose context ended (its job
// removed, replaced or stopped) takes no slot, even a free one.
func TestAdmitCancelledTakesNoSlot(t *testing.T) {
	s, err := New(Config{Runner: &recorder{}, MaxConcurrent: 1})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if release, ok := s.admit(ctx, []string{"s3"}); ok {
		release()
		t.Fatal("a cancelled follower took a free slot")
	}
	release, ok := s.admit(t.Context(), []string{"s3"})
	require.True(t, ok, "a live follower takes the free slot")
	release()
}
