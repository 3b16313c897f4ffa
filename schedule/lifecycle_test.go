package schedule

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// inventory is an Inventory answering from a map.
type inventory struct {
	mu      sync.Mutex
	answers map[string]lastBackup
	asked   []string
}

type lastBackup struct {
	created time.Time
	ok      bool
	err     error
}

func (i *inventory) LastBackup(_ context.Context, job Job) (time.Time, bool, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.asked = append(i.asked, job.ID)
	a := i.answers[job.ID]
	return a.created, a.ok, a.err
}

// TestCatchUpAfterDowntime: at Start, a job whose last backup (from the
// inventory) is older than its last tick runs once right away.
func TestCatchUpAfterDowntime(t *testing.T) {
	noLeaks(t)
	now := utc("2026-01-10T12:00:00Z")
	inv := &inventory{answers: map[string]lastBackup{
		"missed":       {created: utc("2026-01-08T00:00:05Z"), ok: true}, // missed the 9th and the 10th
		"recent":       {created: utc("2026-01-10T00:00:04Z"), ok: true}, // today's is there
		"never":        {},
		"broken":       {err: errors.New("list: unreachable")},
		"oneshot-done": {created: utc("2026-01-01T00:00:00Z"), ok: true},
		"oneshot-new":  {},
	}}
	h := newHarness(t, now, Config{Inventory: inv, MaxJitter: time.Minute})
	for _, id := range []string{"missed", "recent", "never", "broken"} {
		require.NoError(t, h.s.Set(job(id, "@daily")))
	}
	require.NoError(t, h.s.Set(job("oneshot-done", "")))
	require.NoError(t, h.s.Set(job("oneshot-new", "")))
	assert.Zero(t, h.rec.count(), "nothing runs before Start")
	h.start()

	missed := h.rec.callsOf("missed")
	require.Len(t, missed, 1)
	assert.Equal(t, utc("2026-01-09T00:00:00Z"), missed[0].tick.UTC(), "the first tick missed")
	assert.Equal(t, now, missed[0].at, "right away, without jitter")
	never := h.rec.callsOf("never")
	require.Len(t, never, 1)
	assert.True(t, never[0].tick.IsZero())
	assert.Empty(t, h.rec.callsOf("recent"))
	assert.Empty(t, h.rec.callsOf("broken"))
	assert.Empty(t, h.rec.callsOf("oneshot-done"))
	assert.True(t, h.status("oneshot-done").NextRun.IsZero())
	assert.Len(t, h.rec.callsOf("oneshot-new"), 1)

	// Once: the next runs are the schedule's.
	h.advanceTo(utc("2026-01-10T23:59:00Z"))
	assert.Equal(t, 3, h.rec.count())
	h.advanceTo(utc("2026-01-11T00:01:00Z"))
	for _, id := range []string{"missed", "recent", "never", "broken"} {
		calls := h.rec.callsOf(id)
		require.NotEmpty(t, calls, id)
		assert.Equal(t, utc("2026-01-11T00:00:00Z"), calls[len(calls)-1].tick.UTC(), id)
	}
	assert.Equal(t, 7, h.rec.count())

	// A job set while running is checked too.
	inv.mu.Lock()
	inv.answers["added"] = lastBackup{created: utc("2026-01-01T00:00:00Z"), ok: true}
	inv.mu.Unlock()
	require.NoError(t, h.s.Set(job("added", "@daily")))
	h.settle()
	assert.Len(t, h.rec.callsOf("added"), 1)
	require.NoError(t, h.stop())
}

// TestStopWaitsForRuns: a run in flight when Start's context ends may
// finish within StopTimeout; Start returns once it has.
func TestStopWaitsForRuns(t *testing.T) {
	noLeaks(t)
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{StopTimeout: time.Minute})
	started, release := make(chan struct{}), make(chan struct{})
	var runErr error
	h.rec.setHook(func(ctx context.Context, _ Job, _ time.Time) error {
		close(started)
		<-release
		runErr = ctx.Err()
		return nil
	})
	require.NoError(t, h.s.Set(job("j", "@hourly")))
	h.start()
	h.clk.Set(utc("2026-01-01T01:00:00Z"))
	<-started

	h.cancel()
	eventually(t, func() bool { return h.s.isStopping() && h.clk.Pending() == 2 }, "stop deadlines armed")
	h.clk.Advance(30 * time.Second)
	select {
	case <-h.done:
		t.Fatal("Start returned with a run in flight")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-h.done:
		require.NoError(t, err)
		h.cancel = nil
	case <-time.After(waitFor):
		t.Fatal("Start did not return")
	}
	assert.NoError(t, runErr, "the run was not cancelled")
	st := h.status("j")
	assert.EqualValues(t, 1, st.Successes)
	assert.False(t, st.Running)
}

// TestStopCancelsAfterDeadline: a run still going at three quarters of
// StopTimeout is cancelled (its upload aborts) and Start returns once it
// has returned. Runs waiting for a slot never start.
func TestStopCancelsAfterDeadline(t *testing.T) {
	noLeaks(t)
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{StopTimeout: time.Minute, MaxConcurrent: 1})
	started := make(chan struct{}, 2)
	h.rec.setHook(func(ctx context.Context, _ Job, _ time.Time) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	require.NoError(t, h.s.Set(job("a", "@hourly")))
	require.NoError(t, h.s.Set(job("b", "@hourly")))
	h.start()
	h.clk.Set(utc("2026-01-01T01:00:00Z"))
	<-started
	eventually(t, h.s.loopIdle, "loop idle")
	assert.True(t, h.status("b").Queued)

	h.cancel()
	eventually(t, func() bool { return h.s.isStopping() && h.clk.Pending() == 2 }, "stop deadlines armed")
	h.clk.Advance(44 * time.Second)
	select {
	case <-h.done:
		t.Fatal("Start returned before the deadline")
	case <-time.After(20 * time.Millisecond):
	}
	h.clk.Advance(time.Second)
	select {
	case err := <-h.done:
		require.NoError(t, err)
		h.cancel = nil
	case <-time.After(waitFor):
		t.Fatal("Start did not return")
	}
	calls := h.rec.callsOf("a")
	require.Len(t, calls, 1)
	assert.ErrorIs(t, calls[0].err, errStopped)
	st := h.status("a")
	assert.ErrorIs(t, st.LastError, context.Canceled)
	assert.ErrorContains(t, st.LastError, "scheduler stopped")
	assert.Equal(t, 1, st.ConsecutiveFailures)
	assert.Empty(t, h.rec.callsOf("b"), "a queued run never starts")
	assert.False(t, h.status("b").Queued)
	assert.Empty(t, h.rec.pruned())
}

// TestStopReturnsWithinBudget: a run that ignores its cancellation, and
// the release of its lock, which hangs, do not hold Start past StopTimeout:
// the run is cancelled at three quarters of it, the release's context ends
// at its end, and Start returns then.
func TestStopReturnsWithinBudget(t *testing.T) {
	noLeaks(t)
	lock := &hangingLock{released: make(chan error, 1)}
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{StopTimeout: time.Minute, Lock: lock})
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release) // the abandoned run, for the leak check
	cause := make(chan error, 1)
	h.rec.setHook(func(ctx context.Context, _ Job, _ time.Time) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		<-release
		return ctx.Err()
	})
	require.NoError(t, h.s.Set(job("j", "@hourly")))
	h.start()
	h.clk.Set(utc("2026-01-01T01:00:00Z"))
	<-started

	h.cancel()
	eventually(t, func() bool { return h.s.isStopping() && h.clk.Pending() > 0 }, "stop deadlines armed")
	h.clk.Advance(45 * time.Second)
	h.clk.Advance(15 * time.Second)
	select {
	case err := <-h.done:
		require.NoError(t, err)
		h.cancel = nil
	case <-time.After(waitFor):
		t.Fatal("Start did not return at the end of its budget")
	}
	assert.ErrorIs(t, <-cause, errStopped)
	release <- struct{}{}
	select {
	case err := <-lock.released:
		assert.ErrorIs(t, err, context.Canceled, "the lock's release ended with the budget")
	case <-time.After(waitFor):
		t.Fatal("the lock's release never ended")
	}
}

// TestStartAgainWhileAbandonedRunEnds: a scheduler started again while
// the run its last stop abandoned still winds down counts that run's slot
// until it returns, then frees it; the two Starts share no WaitGroup.
func TestStartAgainWhileAbandonedRunEnds(t *testing.T) {
	noLeaks(t)
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{StopTimeout: time.Minute})
	started, release := make(chan struct{}), make(chan struct{})
	h.rec.setHook(func(ctx context.Context, _ Job, _ time.Time) error {
		close(started)
		<-release
		return ctx.Err()
	})
	require.NoError(t, h.s.Set(job("j", "@hourly")))
	h.start()
	h.clk.Set(utc("2026-01-01T01:00:00Z"))
	<-started
	h.cancel()
	eventually(t, func() bool { return h.s.isStopping() && h.clk.Pending() > 0 }, "stop deadlines armed")
	h.clk.Advance(time.Minute)
	require.NoError(t, <-h.done)
	h.cancel = nil

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.s.Start(ctx) }()
	eventually(t, h.s.loopIdle, "started again")
	assert.True(t, h.status("j").Running, "the abandoned run still holds its slot")
	close(release)
	eventually(t, func() bool { return !h.status("j").Running && h.s.quiet() }, "the abandoned run ended")
	assert.ErrorIs(t, h.status("j").LastError, errStopped)
	cancel()
	require.NoError(t, <-done)
}

// hangingLock is a Lock whose release waits until its context ends.
type hangingLock struct{ released chan error }

func (l *hangingLock) Acquire(context.Context, string, time.Time) (Held, error) { return l, nil }
func (l *hangingLock) Lost() <-chan struct{}                                    { return nil }
func (l *hangingLock) Release(ctx context.Context, _ bool) error {
	<-ctx.Done()
	l.released <- ctx.Err()
	return ctx.Err()
}

// fakeLock is a Lock answering from fields.
type fakeLock struct {
	mu       sync.Mutex
	err      error // returned by Acquire
	lost     chan struct{}
	acquired []time.Time
	released []bool
}

func (l *fakeLock) Acquire(_ context.Context, _ string, tick time.Time) (Held, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acquired = append(l.acquired, tick)
	if l.err != nil {
		return nil, l.err
	}
	l.lost = make(chan struct{})
	return fakeHeld{l}, nil
}

type fakeHeld struct{ l *fakeLock }

func (h fakeHeld) Lost() <-chan struct{} {
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	return h.l.lost
}

func (h fakeHeld) Release(_ context.Context, completed bool) error {
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	h.l.released = append(h.l.released, completed)
	return nil
}

func TestLockOutcomes(t *testing.T) {
	tests := []struct {
		name       string
		acquireErr error
		backupErr  error
		loseLock   bool
		wantSkip   SkipReason
		wantErr    error
		wantRelase []bool
	}{
		{name: "held: run, record the tick", wantRelase: []bool{true}},
		{name: "held, backup fails: tick not recorded", backupErr: errors.New("upload: refused"), wantErr: errors.New("upload: refused"), wantRelase: []bool{false}},
		{name: "locked elsewhere", acquireErr: ErrLocked, wantSkip: SkipLocked},
		{name: "tick done elsewhere", acquireErr: ErrTickDone, wantSkip: SkipDone},
		{name: "lock unreachable: a failure", acquireErr: errors.New("etcd: unavailable"), wantErr: errors.New("lock job: etcd: unavailable")},
		{name: "lock lost during the run: cancelled", loseLock: true, wantErr: errLockLost, wantRelase: []bool{false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			noLeaks(t)
			lock := &fakeLock{err: tt.acquireErr}
			h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{Lock: lock})
			h.rec.setHook(func(ctx context.Context, _ Job, _ time.Time) error {
				if tt.loseLock {
					lock.mu.Lock()
					close(lock.lost)
					lock.mu.Unlock()
					<-ctx.Done()
					return ctx.Err()
				}
				return tt.backupErr
			})
			require.NoError(t, h.s.Set(job("j", "@hourly")))
			h.start()
			h.advanceTo(utc("2026-01-01T01:00:00Z"))
			st := h.status("j")
			assert.Equal(t, []time.Time{utc("2026-01-01T01:00:00Z")}, utcTimes(lock.acquired))
			assert.Equal(t, tt.wantRelase, lock.released)
			if tt.wantSkip != "" {
				assert.EqualValues(t, 1, st.SkippedRuns)
				assert.Equal(t, tt.wantSkip, st.LastSkipReason)
				assert.Zero(t, h.rec.count(), "no backup")
				assert.Zero(t, st.Failures)
			} else {
				assert.Zero(t, st.SkippedRuns)
			}
			switch {
			case tt.wantErr == nil:
				assert.NoError(t, st.LastError)
			case errors.Is(tt.wantErr, errLockLost):
				assert.ErrorIs(t, st.LastError, errLockLost)
			default:
				assert.EqualError(t, st.LastError, tt.wantErr.Error())
			}
			require.NoError(t, h.stop())
		})
	}
}

func utcTimes(ts []time.Time) []time.Time {
	out := make([]time.Time, len(ts))
	for i, t := range ts {
		out[i] = t.UTC()
	}
	return out
}

// TestRunnerPanic: a panic in the runner fails that run only.
func TestRunnerPanic(t *testing.T) {
	noLeaks(t)
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{Logger: discardLogger()})
	h.rec.setHook(func(_ context.Context, job Job, _ time.Time) error {
		if job.ID == "broken" {
			panic("nil map")
		}
		return nil
	})
	require.NoError(t, h.s.Set(job("broken", "@hourly")))
	require.NoError(t, h.s.Set(job("fine", "@hourly")))
	h.start()
	h.advanceTo(utc("2026-01-01T01:00:00Z"))
	h.advanceTo(utc("2026-01-01T02:00:00Z"))
	st := h.status("broken")
	assert.EqualError(t, st.LastError, "runner panicked: nil map")
	assert.Equal(t, 2, st.ConsecutiveFailures)
	assert.EqualValues(t, 2, h.status("fine").Successes)
	require.NoError(t, h.stop())
}
