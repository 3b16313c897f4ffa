package schedule

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/etcdbackup/etcdbackup/schedule/scheduletest"
)

// waitFor bounds the real time a test waits for the scheduler's
// goroutines: long enough for a busy machine, where a goroutine may wait
// seconds for a core.
const waitFor = 30 * time.Second

// quiet reports whether the scheduler is running and has nothing left to
// do until its clock moves: the loop waits with no wake-up pending and no
// tick due, and nothing is in flight or queued.
func (s *Scheduler) quiet() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loopIdleLocked() && s.inFlight == 0 && len(s.queue) == 0 && s.checking == 0 && len(s.checks) == 0
}

// loopIdle reports whether the loop waits with no wake-up pending and no
// tick due (runs may be in flight).
func (s *Scheduler) loopIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loopIdleLocked()
}

// loopIdleLocked is loopIdle; the caller holds s.mu. Idle with no signal
// unseen is not enough: the loop may have taken a wake-up sent before its
// last pass (so seen already counts it) and cancelled its clock call, and
// not yet have taken s.mu. A clock moved then calls nothing, and the loop
// finds the tick when it runs, later than the test looked. So the time
// the loop waits for (its next tick, or its heartbeat's maxSleep) must
// also be ahead of the clock.
func (s *Scheduler) loopIdleLocked() bool {
	if !s.running || s.stopping || !s.idle || s.seen != s.signals.Load() {
		return false
	}
	wake := s.heartbeat.Add(maxSleep)
	if len(s.timeline) > 0 && s.timeline[0].fire.Before(wake) {
		wake = s.timeline[0].fire
	}
	return wake.After(s.clock.Now())
}

// runsReached reports whether the loop is idle and every run the
// scheduler has in flight has reached the recorder: a run's goroutine may
// start late on a busy machine, so a count of the recorder's calls means
// nothing before. For a harness whose recorder is the runner and that has
// no Lock (a run refused by the lock never reaches the runner).
func (h *harness) runsReached() bool {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	return h.s.loopIdleLocked() && h.s.inFlight == h.rec.inFlight
}

// isStopping reports whether Start is stopping and waits for the
// runs in flight.
func (s *Scheduler) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// eventually waits for cond, polling.
func eventually(t testing.TB, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", msg)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// noLeaks checks, when the test ends (after every other cleanup), that no
// goroutine is left behind.
func noLeaks(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
}

// call is one Backup the recorder saw.
type call struct {
	job  string
	tick time.Time
	at   time.Time
	err  error // the context's cause when the run returned, if it ended
}

// recorder is a Runner that records its calls and the concurrency it saw.
type recorder struct {
	clk *scheduletest.Clock
	// hook, when set, runs inside Backup while the call counts as in
	// flight; its error is Backup's.
	hook func(ctx context.Context, job Job, tick time.Time) error
	// pruneErr is returned by Prune.
	pruneErr error

	mu          sync.Mutex
	calls       []call
	prunes      []string
	inFlight    int
	maxInFlight int
	perDest     map[string]int
	maxPerDest  map[string]int
	perJob      map[string]int
	overlaps    int
}

func newRecorder(clk *scheduletest.Clock) *recorder {
	return &recorder{clk: clk, perDest: map[string]int{}, maxPerDest: map[string]int{}, perJob: map[string]int{}}
}

func (r *recorder) Backup(ctx context.Context, job Job, tick time.Time) error {
	r.mu.Lock()
	r.inFlight++
	r.maxInFlight = max(r.maxInFlight, r.inFlight)
	for _, d := range job.Destinations {
		r.perDest[d]++
		r.maxPerDest[d] = max(r.maxPerDest[d], r.perDest[d])
	}
	if r.perJob[job.ID]++; r.perJob[job.ID] > 1 {
		r.overlaps++
	}
	i := len(r.calls)
	r.calls = append(r.calls, call{job: job.ID, tick: tick, at: r.clk.Now()})
	hook := r.hook
	r.mu.Unlock()

	var err error
	if hook != nil {
		err = hook(ctx, job, tick)
	}

	r.mu.Lock()
	r.inFlight--
	for _, d := range job.Destinations {
		r.perDest[d]--
	}
	r.perJob[job.ID]--
	r.calls[i].err = context.Cause(ctx)
	r.mu.Unlock()
	return err
}

func (r *recorder) Prune(ctx context.Context, job Job) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prunes = append(r.prunes, job.ID)
	return r.pruneErr
}

func (r *recorder) setHook(h func(ctx context.Context, job Job, tick time.Time) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hook = h
}

// callsOf returns the calls of one job.
func (r *recorder) callsOf(id string) []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []call
	for _, c := range r.calls {
		if c.job == id {
			out = append(out, c)
		}
	}
	return out
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func (r *recorder) pruned() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.prunes)
}

// harness runs a scheduler on a manual clock.
type harness struct {
	t      *testing.T
	clk    *scheduletest.Clock
	rec    *recorder
	s      *Scheduler
	cancel context.CancelFunc
	done   chan error
}

// newHarness returns a scheduler on a manual clock reading now, with a
// recorder as its runner unless cfg has one.
func newHarness(t *testing.T, now time.Time, cfg Config) *harness {
	t.Helper()
	h := &harness{t: t, clk: scheduletest.NewClock(now)}
	h.rec = newRecorder(h.clk)
	if cfg.Runner == nil {
		cfg.Runner = h.rec
	}
	cfg.Clock = h.clk
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	s, err := New(cfg)
	require.NoError(t, err)
	h.s = s
	return h
}

// start runs Start in a goroutine and waits until the scheduler has
// nothing to do; the test's cleanup stops it.
func (h *harness) start() {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- h.s.Start(ctx) }()
	h.t.Cleanup(func() {
		if h.cancel != nil {
			h.cancel()
			<-h.done
		}
	})
	h.settle()
}

// stop ends Start and returns its error.
func (h *harness) stop() error {
	h.t.Helper()
	h.cancel()
	select {
	case err := <-h.done:
		h.cancel = nil
		return err
	case <-time.After(waitFor):
		h.t.Fatal("Start did not return")
		return nil
	}
}

// settle waits until the scheduler has nothing to do until the clock
// moves.
func (h *harness) settle() {
	h.t.Helper()
	eventually(h.t, h.s.quiet, "scheduler to settle")
}

// advanceTo moves the clock to t and waits for the scheduler to settle.
func (h *harness) advanceTo(t time.Time) {
	h.t.Helper()
	h.clk.Set(t)
	h.settle()
}

// jumpTo moves the clock to t at once, as a process paused until t sees
// it (scheduletest.Clock.Jump), and waits for the scheduler to settle.
func (h *harness) jumpTo(t time.Time) {
	h.t.Helper()
	h.clk.Jump(t)
	h.settle()
}

// status returns the status of one job.
func (h *harness) status(id string) Status {
	h.t.Helper()
	st, ok := h.s.Get(id)
	require.True(h.t, ok, "job %s", id)
	return st.Status
}

// testLogger logs warnings and errors to the test's log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// job returns a valid job on schedule expr.
func job(id, expr string) Job {
	return Job{ID: id, Schedule: expr, Cluster: "prod-a", Name: "backup", Destinations: []string{"s3"}}
}

// discardLogger logs nothing, for tests whose failures are expected.
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
