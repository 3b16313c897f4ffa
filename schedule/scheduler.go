package schedule

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/etcdbackup/etcdbackup/internal/cleanup"
)

// Defaults of Config.
const (
	DefaultMaxConcurrent     = 4
	DefaultMaxPerDestination = 2
	// DefaultStopTimeout fits a controller-manager's usual 30 seconds of
	// graceful shutdown, with room for the rest of the host's.
	DefaultStopTimeout = 20 * time.Second
)

const (
	// maxSleep bounds how long the loop sleeps, so that a jump of the
	// wall clock (a suspended VM, a stepped NTP) delays a run by at most
	// this much.
	maxSleep = time.Minute
	// releaseTimeout bounds the release of a Lock after a run.
	releaseTimeout = 10 * time.Second
)

// Causes of a run's cancellation, reported in its error.
var (
	errRemoved  = errors.New("job removed")
	errStopped  = errors.New("scheduler stopped before the run ended")
	errLockLost = errors.New("job lock lost")
	// errStopBudget ends the cleanups still going when StopTimeout has
	// passed.
	errStopBudget = errors.New("scheduler's stop budget spent")
)

// Config configures a Scheduler. Runner is required; the zero value of
// every other field is documented.
type Config struct {
	// Runner runs the jobs. Required.
	Runner Runner
	// Inventory, when set, is asked at Start (and when a job is first set
	// while running) when each job last backed up: a job that missed a
	// tick since then, or never backed up, runs once right away, and a
	// one-shot job that already has its backup does not run. Nil means
	// no catch-up: missed ticks are not made up.
	Inventory Inventory
	// Lock, when set, is taken around every run (see EtcdLock). Nil means
	// no coordination between replicas: a host then runs the scheduler
	// on its elected leader only.
	Lock Lock
	// Clock tells the time; nil means SystemClock.
	Clock Clock

	// MaxConcurrent bounds the runs in flight, and also the Inventory
	// checks in flight. Zero means DefaultMaxConcurrent.
	MaxConcurrent int
	// MaxPerDestination bounds the runs in flight that write to one
	// destination; a run holds a slot on each of its job's destinations.
	// Zero means DefaultMaxPerDestination.
	MaxPerDestination int
	// MaxJitter delays each job's ticks by a fixed duration in
	// [0, MaxJitter), derived from a hash of its ID: the same on every
	// replica and across restarts, different from job to job, so that
	// many jobs on the same schedule do not all start in the same second.
	// Keep it below the shortest interval of the schedules. Zero means
	// no jitter.
	MaxJitter time.Duration
	// RunTimeout bounds each run (backup and retention): a run still going
	// then is cancelled, with ErrRunTimeout as its error, and frees its
	// slots and its lock, so that a stalled destination or etcd cannot
	// hold them, and skip the job's later ticks as overlaps, for ever.
	// Its tick is not completed: another replica may run it. A one-shot
	// job so cancelled is not done: it is queued again at once (and, if
	// the scheduler stops first, at its next Start). Zero means no limit.
	RunTimeout time.Duration
	// StopTimeout is the whole budget of a stop: Start returns at most
	// StopTimeout after its context ended, whatever is still going then.
	// Within it, the runs in flight may finish during its first three
	// quarters, then they are cancelled and have the rest to clean up
	// (remove the data they wrote without a manifest, release their
	// lock); the continuous backups are cancelled at once and store their
	// last segment within the whole budget (and their FinalCommitTimeout).
	// See Start for what is committed and what is abandoned. Zero means
	// DefaultStopTimeout.
	StopTimeout time.Duration

	// Logger receives the scheduler's log; nil means silent.
	Logger *slog.Logger
}

// Validate reports a missing runner and negative limits.
func (c Config) Validate() error {
	var errs []error
	if c.Runner == nil {
		errs = append(errs, errors.New("no runner"))
	}
	if c.MaxConcurrent < 0 {
		errs = append(errs, errors.New("negative MaxConcurrent"))
	}
	if c.MaxPerDestination < 0 {
		errs = append(errs, errors.New("negative MaxPerDestination"))
	}
	if c.MaxJitter < 0 {
		errs = append(errs, errors.New("negative MaxJitter"))
	}
	if c.RunTimeout < 0 {
		errs = append(errs, errors.New("negative RunTimeout"))
	}
	if c.StopTimeout < 0 {
		errs = append(errs, errors.New("negative StopTimeout"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

// Scheduler runs backup jobs on their cron schedules. The host reconciles
// the desired jobs into it with Set and Remove, reads their state with
// List, and runs it with Start; see the package documentation. Create one
// with New. It is safe for concurrent use.
type Scheduler struct {
	runner      Runner
	inventory   Inventory
	lock        Lock
	clock       Clock
	log         *slog.Logger
	maxRuns     int
	maxPerDest  int
	maxJitter   time.Duration
	runTimeout  time.Duration
	stopTimeout time.Duration

	wake    chan struct{}
	signals atomic.Uint64 // counts wake-ups asked for

	zoneMu sync.Mutex
	zones  map[string]*time.Location

	mu   sync.Mutex
	jobs map[string]*entry
	// removing holds, by job ID, what a Remove cancelled until a Remove
	// of that ID saw it end (or a later Remove finds it ended): a Remove
	// whose ctx ended first leaves it for a Remove of the same ID again
	// to wait for, and a job set again with that ID starts its continuous
	// backup only after the old one ended.
	removing map[string]*removal
	timeline timeline // jobs with a next tick, soonest first
	queue    []*entry // due runs waiting for a slot, oldest first
	checks   []*entry // jobs waiting for their Inventory check
	inFlight int
	checking int
	perDest  map[string]int
	running  bool // Start is running
	stopping bool
	runCtx   context.Context // parent of the runs of the current Start
	checkCtx context.Context // parent of the Inventory checks

	// slotFreed is closed, and replaced, whenever a run slot frees:
	// continuous backups waiting to start (admit) take it at once rather
	// than at their next retry, which would bound a scheduler's starts to
	// its slots per admitRetry however short each start.
	slotFreed chan struct{}

	// followCtx is the parent of the continuous backups, and cancelFollow
	// ends them.
	followCtx    context.Context
	cancelFollow context.CancelFunc
	// endCleanup ends the cleanups of the runs and continuous backups
	// (see internal/cleanup) when the stop budget is spent.
	endCleanup context.CancelCauseFunc
	// wg counts the runs, checks and continuous backups of the current
	// Start: each Start has its own, since one that stopped at its budget
	// leaves behind what had not ended.
	wg   *sync.WaitGroup
	idle bool // the loop waits for a wake-up
	// heartbeat is when the loop last ran: at least every maxSleep while
	// the scheduler runs.
	heartbeat time.Time
	seen      uint64 // signals the loop has taken in
}

// removal is what Removes of one job ID cancelled that had not ended
// when the last of them started: the newest of its continuous backups
// (each waits for the one before it to end, see superviseFollow, so the
// newest ends last) and its runs, oldest first (several when the job was
// set again between Removes that gave up waiting). It is not changed
// once stored: a new Remove stores a new one.
type removal struct {
	follow *followRun
	runs   []*run
}

// ended reports whether all of it has ended.
func (rm *removal) ended() bool {
	if rm.follow != nil && !isClosed(rm.follow.done) {
		return false
	}
	for _, r := range rm.runs {
		if !isClosed(r.done) {
			return false
		}
	}
	return true
}

// pending returns a new removal of what of rm has not ended.
func (rm *removal) pending() *removal {
	out := &removal{}
	if rm == nil {
		return out
	}
	if rm.follow != nil && !isClosed(rm.follow.done) {
		out.follow = rm.follow
	}
	for _, r := range rm.runs {
		if !isClosed(r.done) {
			out.runs = append(out.runs, r)
		}
	}
	return out
}

// empty reports whether it holds nothing.
func (rm *removal) empty() bool { return rm.follow == nil && len(rm.runs) == 0 }

// lastFollow returns the newest continuous backup it holds, nil if none.
func (rm *removal) lastFollow() *followRun {
	if rm == nil {
		return nil
	}
	return rm.follow
}

// isClosed reports whether ch is closed.
func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// wait waits until all of it ended, or ctx ended first; what has ended
// counts as ended whatever ctx.
func (rm *removal) wait(ctx context.Context, id string) error {
	if f := rm.follow; f != nil {
		if err := awaitDone(ctx, f.done); err != nil {
			return fmt.Errorf("remove job %s: its continuous backup is still ending: %w", quoteID(id), err)
		}
	}
	for _, r := range rm.runs {
		if err := awaitDone(ctx, r.done); err != nil {
			return fmt.Errorf("remove job %s: its run is still ending: %w", quoteID(id), err)
		}
	}
	return nil
}

// awaitDone waits until done is closed, or ctx ends first.
func awaitDone(ctx context.Context, done chan struct{}) error {
	if isClosed(done) {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// entry is a job and its state.
type entry struct {
	job    Job
	sched  *cronSchedule // nil for a one-shot job
	jitter time.Duration

	// tick is the next tick and fire when it runs (tick + jitter). For a
	// one-shot job that has yet to run, fire is when it was set.
	tick, fire time.Time
	index      int // in the timeline; -1 when not in it

	due         *dueRun    // a run waiting in the queue
	run         *run       // the run in flight
	follow      *followRun // the continuous backup, while running
	ending      *followRun // a replaced continuous backup that no follow waits for, until it ends
	check       bool       // waiting for, or in, its Inventory check
	oneShotDone bool
	removed     bool

	status  Status   // NextRun, Running and Queued are derived
	skipped [3]int64 // by reason, in the order of skipReasons
}

// skip records a run skipped at t for reason.
func (e *entry) skip(reason SkipReason, t time.Time) {
	e.status.SkippedRuns++
	e.status.LastSkip, e.status.LastSkipReason = t, reason
	e.skipped[slices.Index(skipReasons, reason)]++
}

// runKind says why a run happens.
type runKind int

const (
	runScheduled runKind = iota
	runCatchUp
	runOneShot
)

func (k runKind) String() string {
	switch k {
	case runCatchUp:
		return "catch-up"
	case runOneShot:
		return "one-shot"
	}
	return "scheduled"
}

type dueRun struct {
	tick time.Time
	kind runKind
}

type run struct {
	tick    time.Time
	kind    runKind
	started time.Time
	cancel  context.CancelCauseFunc
	done    chan struct{} // closed when the run has returned
	// stopTimer stops the timer of RunTimeout; nil without one.
	stopTimer func() bool
}

// New returns a scheduler with no jobs. It runs nothing until Start.
func New(cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Scheduler{
		runner:      cfg.Runner,
		inventory:   cfg.Inventory,
		lock:        cfg.Lock,
		clock:       cfg.Clock,
		log:         cfg.Logger,
		maxRuns:     cmp.Or(cfg.MaxConcurrent, DefaultMaxConcurrent),
		maxPerDest:  cmp.Or(cfg.MaxPerDestination, DefaultMaxPerDestination),
		maxJitter:   cfg.MaxJitter,
		runTimeout:  cfg.RunTimeout,
		stopTimeout: cmp.Or(cfg.StopTimeout, DefaultStopTimeout),
		wake:        make(chan struct{}, 1),
		zones:       map[string]*time.Location{},
		jobs:        map[string]*entry{},
		removing:    map[string]*removal{},
		perDest:     map[string]int{},
		slotFreed:   make(chan struct{}),
	}
	if s.clock == nil {
		s.clock = SystemClock{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// NeedLeaderElection returns true: a controller-manager runs the scheduler
// on its elected leader only (controller-runtime's
// LeaderElectionRunnable).
func (s *Scheduler) NeedLeaderElection() bool { return true }

// Set adds a job, or updates the job with the same ID. A job equal to the
// one set is left alone. A change of Schedule or TimeZone reschedules the
// job from now; other changes apply from its next run, and a run in
// flight finishes with the definition it started with. A job that becomes
// one-shot runs once, as soon as possible. Set does no I/O; an invalid
// job is refused with a *JobError (ErrInvalidJob), whose schedule and time
// zone problems are *ScheduleError values.
func (s *Scheduler) Set(job Job) error {
	sched, err := job.compile(s.location)
	if err != nil {
		return err
	}
	if _, ok := s.runner.(ContinuousRunner); job.Continuous != nil && !ok {
		return &JobError{ID: job.ID, Err: errors.New("continuous backup: the scheduler's runner has no Follow method (see ContinuousRunner)")}
	}
	if _, ok := s.runner.(CompactingRunner); job.Continuous != nil && job.Continuous.CompactInterval > 0 && !ok {
		return &JobError{ID: job.ID, Err: errors.New("compaction: the scheduler's runner has no Compact method (see CompactingRunner)")}
	}
	job = job.clone()
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgetEndedRemovals()
	if err := s.replicationOverlap(job); err != nil {
		return &JobError{ID: job.ID, Err: err}
	}
	e := s.jobs[job.ID]
	switch {
	case e == nil:
		e = &entry{job: job, sched: sched, index: -1, jitter: jitterOf(job.ID, s.maxJitter)}
		s.jobs[job.ID] = e
		s.plan(e, now, true)
		s.startFollow(e)
		s.log.Debug("job set", "job", job.ID, "cluster", job.Cluster, "schedule", job.Schedule, "next", e.fire)
	case e.job.equal(&job):
		return nil
	default:
		retimed := e.job.timing() != job.timing()
		refollow := e.job.followKey() != job.followKey()
		e.job, e.sched = job, sched
		if retimed {
			e.oneShotDone = false
			s.plan(e, now, false)
		}
		if refollow {
			s.startFollow(e) // the continuous backup starts again with the new definition
		}
		s.log.Debug("job updated", "job", job.ID, "cluster", job.Cluster, "schedule", job.Schedule, "next", e.fire)
	}
	s.signal()
	return nil
}

// Remove removes a job. A run of it that is due is dropped, and a run in
// flight and its continuous backup are cancelled (the backup aborts,
// leaving nothing visible; the continuous backup stores what it holds):
// Remove waits until they have returned, or until ctx ends, and then
// returns ctx's error while they finish their cancellation; a Remove of
// the same ID again waits for them, and a job set again with that ID
// meanwhile may start a run before they end, but not its continuous
// backup. Once Remove has returned nil nothing of the job runs any more,
// so a host may delete the cluster's backups next. Removing an unknown
// job does nothing, unless an earlier Remove of that ID returned before
// what it cancelled ended: then it waits for that.
func (s *Scheduler) Remove(ctx context.Context, id string) error {
	s.mu.Lock()
	s.forgetEndedRemovals()
	e := s.jobs[id]
	if e == nil {
		rm := s.removing[id]
		s.mu.Unlock()
		if rm == nil {
			return nil
		}
		return s.awaitRemoval(ctx, id, rm)
	}
	delete(s.jobs, id)
	e.removed = true
	s.timeline.remove(e)
	if e.due != nil {
		s.queue = slices.DeleteFunc(s.queue, func(q *entry) bool { return q == e })
		e.due = nil
	}
	s.checks = slices.DeleteFunc(s.checks, func(q *entry) bool { return q == e })
	rm := s.removing[id].pending()
	f := e.follow
	if f == nil {
		// A Set that turned Continuous off left the old one ending.
		f = e.ending
	}
	e.follow, e.ending = nil, nil
	// Both are cancelled under s.mu, as a replacement or a stop cancels
	// them: a follower woken by a freed slot sees it removed before it
	// takes the slot (admit), never after.
	if f != nil {
		// The job's own continuous backup, or the removed one it waits
		// for (set again with none): either ends after the one before.
		f.cancel()
		rm.follow = f
	}
	if e.run != nil {
		e.run.cancel(errRemoved)
		rm.runs = append(rm.runs, e.run)
	}
	if rm.empty() {
		delete(s.removing, id)
	} else {
		s.removing[id] = rm
	}
	s.mu.Unlock()
	s.signal()
	s.log.Debug("job removed", "job", id)
	return s.awaitRemoval(ctx, id, rm)
}

// forgetEndedRemovals forgets the removals that have ended though no
// Remove saw it (one gave up waiting and was not called again). The
// caller holds s.mu.
func (s *Scheduler) forgetEndedRemovals() {
	for id, rm := range s.removing {
		if rm.ended() {
			delete(s.removing, id)
		}
	}
}

// awaitRemoval waits for what the Removes of job id cancelled, rm and
// what another Remove of it stored meanwhile (the job set again and
// removed again), and forgets it once ended. It returns nil once nothing
// of the removed job runs, or once the job is set again.
func (s *Scheduler) awaitRemoval(ctx context.Context, id string, rm *removal) error {
	for {
		if err := rm.wait(ctx, id); err != nil {
			return err
		}
		s.mu.Lock()
		cur := s.removing[id]
		_, listed := s.jobs[id]
		switch {
		case cur == rm:
			delete(s.removing, id)
		case cur != nil && !listed && !cur.ended():
			rm = cur
			s.mu.Unlock()
			continue
		}
		s.mu.Unlock()
		return nil
	}
}

// List returns every job with its status, ordered by ID.
func (s *Scheduler) List() []JobStatus {
	s.mu.Lock()
	out := make([]JobStatus, 0, len(s.jobs))
	for _, e := range s.jobs {
		out = append(out, e.jobStatus())
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b JobStatus) int { return cmp.Compare(a.Job.ID, b.Job.ID) })
	return out
}

// Get returns the job with the given ID and its status, and false if
// there is none.
func (s *Scheduler) Get(id string) (JobStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.jobs[id]
	if e == nil {
		return JobStatus{}, false
	}
	return e.jobStatus(), true
}

// jobStatus returns the job and its status. The caller holds s.mu.
func (e *entry) jobStatus() JobStatus {
	return JobStatus{Job: e.job.clone(), Status: e.currentStatus()}
}

// currentStatus returns e's status with its derived fields. The caller
// holds s.mu.
func (e *entry) currentStatus() Status {
	st := e.status
	st.Running = e.run != nil
	st.Queued = e.due != nil
	st.Following = e.follow != nil && e.follow.following
	if e.index >= 0 || (e.sched == nil && !e.oneShotDone && e.run == nil) {
		st.NextRun = e.fire
	}
	return st
}

// Start runs the scheduler until ctx ends. It first reschedules every job
// from now and, with an Inventory, checks which jobs missed a tick. It
// returns ErrRunning if the scheduler is already running; it may be
// started again once it has returned.
//
// When ctx ends, Start starts nothing new and returns nil within
// StopTimeout, so that a host with a grace period of a little more is not
// killed in the middle of it:
//   - The continuous backups are cancelled at once, and each stores the
//     revisions it holds as a last segment.
//   - The runs in flight may finish until three quarters of StopTimeout;
//     those still going then are cancelled (their error wraps "scheduler
//     stopped") and, in the last quarter, remove the data they wrote and
//     release their lock.
//   - When StopTimeout has passed, whatever has not ended is abandoned:
//     Start returns while it winds down, its cleanups ended. A continuous
//     backup abandoned so is still the job's: Remove waits for it, and
//     the next Start starts the job's continuous backup only once it has
//     returned.
//
// Committed, whatever happens next: the backups of the runs that ended
// before their cancellation (and their ticks, in the Lock), and the
// segments stored before the budget ran out. Abandoned, with nothing
// visible, since a backup or a segment becomes visible only with its
// manifest: a cancelled run's backup, and a last segment not stored in
// time, whose revisions the next continuous backup reads again from etcd
// (after the last segment committed, so that its chain stays contiguous).
// Data objects whose manifest was never written may stay behind, as after
// a crash: retention deletes them as orphans once older than its grace
// (retention.PlanOptions.OrphanGrace), and stale incomplete uploads too.
// A lock not released expires with its lease. A process killed at the end
// of StopTimeout leaves the same.
//
// Start and NeedLeaderElection make the scheduler a controller-runtime
// Runnable that runs on the elected leader only.
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return ErrRunning
	}
	s.running, s.stopping = true, false
	// Runs and continuous backups outlive ctx until the stop budget is
	// spent; so do their cleanups, not past it.
	bounded, endCleanup := cleanup.Bound(context.WithoutCancel(ctx))
	runCtx, cancelRuns := context.WithCancelCause(bounded)
	checkCtx, cancelChecks := context.WithCancel(ctx)
	s.runCtx, s.checkCtx, s.endCleanup = runCtx, checkCtx, endCleanup
	s.followCtx, s.cancelFollow = context.WithCancel(bounded)
	s.wg = new(sync.WaitGroup)
	now := s.clock.Now()
	ids := make([]string, 0, len(s.jobs))
	for id := range s.jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		s.plan(s.jobs[id], now, true)
		s.startFollow(s.jobs[id])
	}
	s.log.Info("scheduler started", "jobs", len(s.jobs), "checks", len(s.checks))
	s.mu.Unlock()

	s.loop(ctx)
	s.shutdown(cancelRuns, cancelChecks)
	return nil
}

// plan schedules e's next run from now. For a new job (or every job at
// Start) of a running scheduler with an Inventory, it also queues its
// check. The caller holds s.mu.
func (s *Scheduler) plan(e *entry, now time.Time, first bool) {
	s.timeline.remove(e)
	e.tick, e.fire = time.Time{}, time.Time{}
	check := first && s.running && s.inventory != nil
	if e.sched == nil {
		if e.oneShotDone || e.run != nil || e.due != nil {
			return
		}
		e.fire = now
		switch {
		case !s.running || s.stopping:
			// Start queues it.
		case check:
			s.addCheck(e)
		default:
			s.makeDue(e, time.Time{}, runOneShot, now)
		}
		return
	}
	// A tick whose jittered start has not come yet is still due: a
	// restart or a leader change during the jitter must not skip it.
	if e.tick = e.sched.next(now.Add(-e.jitter)); !e.tick.IsZero() {
		e.fire = e.tick.Add(e.jitter)
		s.timeline.push(e)
	}
	if check {
		s.addCheck(e)
	}
}

func (s *Scheduler) addCheck(e *entry) {
	if !e.check {
		e.check = true
		s.checks = append(s.checks, e)
	}
}

// signal wakes the loop up.
func (s *Scheduler) signal() {
	s.signals.Add(1)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// loop fires the jobs' ticks and starts what is due until ctx ends.
func (s *Scheduler) loop(ctx context.Context) {
	for ctx.Err() == nil {
		s.mu.Lock()
		s.idle = false
		s.seen = s.signals.Load()
		now := s.clock.Now()
		s.heartbeat = now
		s.fireDue(now)
		s.dispatch(now)
		// The loop wakes at least every maxSleep, jobs or not: its
		// heartbeat tells it runs.
		at := now.Add(maxSleep)
		if len(s.timeline) > 0 && s.timeline[0].fire.Before(at) {
			at = s.timeline[0].fire
		}
		stop := s.clock.At(at, s.signal)
		s.idle = true
		s.mu.Unlock()

		select {
		case <-ctx.Done():
			stop()
			return
		case <-s.wake:
		}
		stop()
	}
}

// fireDue takes the ticks due at now off the timeline, schedules each
// job's next tick, and queues the runs. Ticks missed (the process was
// paused) collapse into one run. The caller holds s.mu.
func (s *Scheduler) fireDue(now time.Time) {
	for len(s.timeline) > 0 && !s.timeline[0].fire.After(now) {
		e := s.timeline[0]
		s.timeline.remove(e)
		tick := e.tick
		from := tick
		if late := now.Add(-e.jitter); late.After(from) {
			from = late
		}
		if e.tick = e.sched.next(from); e.tick.IsZero() {
			e.fire = time.Time{}
		} else {
			e.fire = e.tick.Add(e.jitter)
			s.timeline.push(e)
		}
		s.makeDue(e, tick, runScheduled, now)
	}
}

// makeDue queues a run of e, or records it as skipped when e already has
// a run in flight or queued. The caller holds s.mu.
func (s *Scheduler) makeDue(e *entry, tick time.Time, kind runKind, now time.Time) {
	if e.run != nil || e.due != nil {
		e.skip(SkipOverlap, now)
		s.log.Warn("run skipped: the previous one has not ended", "job", e.job.ID, "cluster", e.job.Cluster, "tick", tick)
		return
	}
	e.due = &dueRun{tick: tick, kind: kind}
	s.queue = append(s.queue, e)
}

// dispatch starts the checks and the runs that have free slots, oldest
// first; a run whose destination is busy lets the runs behind it pass.
// The caller holds s.mu.
func (s *Scheduler) dispatch(now time.Time) {
	if !s.running || s.stopping {
		return
	}
	for len(s.checks) > 0 && s.checking < s.maxRuns {
		e := s.checks[0]
		s.checks[0] = nil
		s.checks = s.checks[1:]
		s.startCheck(e)
	}
	if len(s.checks) == 0 {
		s.checks = nil
	}
	kept := s.queue[:0]
	started := false
	for i, e := range s.queue {
		if s.inFlight >= s.maxRuns {
			kept = append(kept, s.queue[i:]...)
			break
		}
		if !s.slotsFree(e.job.Destinations) {
			kept = append(kept, e)
			continue
		}
		s.startRun(e, now)
		started = true
	}
	clear(s.queue[len(kept):])
	s.queue = kept
	if started && s.inFlight < s.maxRuns {
		// The continuous backups that let these runs go first (admit)
		// take the slots left.
		s.freeSlot()
	}
}

func (s *Scheduler) slotsFree(destinations []string) bool {
	for _, d := range destinations {
		if s.perDest[d] >= s.maxPerDest {
			return false
		}
	}
	return true
}

// startRun starts e's due run. The caller holds s.mu.
func (s *Scheduler) startRun(e *entry, now time.Time) {
	d := e.due
	e.due = nil
	ctx, cancel := context.WithCancelCause(s.runCtx)
	r := &run{tick: d.tick, kind: d.kind, started: now, cancel: cancel, done: make(chan struct{})}
	if s.runTimeout > 0 {
		r.stopTimer = s.clock.At(now.Add(s.runTimeout), func() { cancel(ErrRunTimeout) })
	}
	e.run = r
	job := e.job
	job.continuousPeers = s.continuousPeers(job)
	s.inFlight++
	for _, dst := range job.Destinations {
		s.perDest[dst]++
	}
	s.wg.Add(1)
	go s.execute(ctx, s.wg, e, r, job)
}

// replicationOverlap refuses a replication job whose prune would count
// the copies of another replication job of its cluster on a common
// target: a copy records no source nor job, so two jobs there prune each
// other's copies unless each is scoped to its own backup name
// (Replicate.Name) and their names differ. One-shot jobs prune nothing:
// two of them do not overlap. The caller holds s.mu.
func (s *Scheduler) replicationOverlap(job Job) error {
	r := job.Replicate
	if r == nil {
		return nil
	}
	for id, o := range s.jobs {
		or := o.job.Replicate
		if id == job.ID || or == nil || o.job.Cluster != job.Cluster || r.Name != "" && or.Name != "" && r.Name != or.Name ||
			job.OneShot() && o.job.OneShot() { // neither prunes
			continue
		}
		for _, d := range job.Destinations {
			if slices.Contains(o.job.Destinations, d) {
				return fmt.Errorf("replication job %s of cluster %s copies to destination %s too: each job's retention would prune the other's copies there (give each its own Replicate.Name)", quoteID(id), job.Cluster, d)
			}
		}
	}
	return nil
}

// continuousPeers returns the names of the other continuous jobs of job's
// cluster: the chains of segments starting from their full backups are
// theirs to prune. The caller holds s.mu.
func (s *Scheduler) continuousPeers(job Job) []string {
	var names []string
	for _, o := range s.jobs {
		if o.job.Continuous != nil && o.job.Cluster == job.Cluster && o.job.Name != job.Name && !slices.Contains(names, o.job.Name) {
			names = append(names, o.job.Name)
		}
	}
	slices.Sort(names)
	return names
}

// outcome is what became of a run.
type outcome struct {
	skip     SkipReason
	err      error
	pruned   bool
	pruneErr error
}

// execute performs a run and records its outcome.
func (s *Scheduler) execute(ctx context.Context, wg *sync.WaitGroup, e *entry, r *run, job Job) {
	defer wg.Done()
	s.log.Debug("run started", "job", job.ID, "cluster", job.Cluster, "tick", r.tick, "kind", r.kind.String())
	out := s.performSafely(ctx, job, r.tick)
	end := s.clock.Now()
	if r.stopTimer != nil {
		r.stopTimer()
	}

	s.mu.Lock()
	s.inFlight--
	for _, dst := range job.Destinations {
		if s.perDest[dst]--; s.perDest[dst] <= 0 {
			delete(s.perDest, dst)
		}
	}
	e.run = nil
	s.freeSlot()
	// A one-shot run cancelled at RunTimeout did not happen: it runs
	// again at once (or at the next Start).
	timedOut := out.err != nil && errors.Is(context.Cause(ctx), ErrRunTimeout)
	if r.kind == runOneShot && !timedOut {
		e.oneShotDone = true
	}
	s.record(e, r, job, out, end)
	if r.kind == runOneShot && timedOut && !e.removed {
		s.plan(e, end, false)
	}
	s.mu.Unlock()

	r.cancel(nil)
	close(r.done)
	s.signal()
}

// performSafely is perform, with a panic of the host's code turned into
// the run's error: one broken job must not stop the others.
func (s *Scheduler) performSafely(ctx context.Context, job Job, tick time.Time) (out outcome) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("runner panicked", "job", job.ID, "panic", p, "stack", string(debug.Stack()))
			out = outcome{err: fmt.Errorf("runner panicked: %v", p)}
		}
	}()
	return s.perform(ctx, job, tick)
}

// perform takes the job's lock, if any, and runs its backup, then its
// retention.
func (s *Scheduler) perform(ctx context.Context, job Job, tick time.Time) outcome {
	if s.lock != nil {
		held, err := s.lock.Acquire(ctx, job.ID, tick)
		switch {
		case errors.Is(err, ErrLocked):
			return outcome{skip: SkipLocked}
		case errors.Is(err, ErrTickDone):
			return outcome{skip: SkipDone}
		case err != nil:
			return outcome{err: fmt.Errorf("lock job: %w", err)}
		}
		ctx, release := s.whileHeld(ctx, held, "job lock", job.ID, false)
		completed := false
		defer func() { release(completed) }() // a panic of the runner releases it too
		out := s.backupAndPrune(ctx, job, tick)
		completed = out.err == nil
		return out
	}
	return s.backupAndPrune(ctx, job, tick)
}

// whileHeld returns a context that ends with errLockLost when held is
// lost, and the function that releases the lock (completing its tick or
// not) and ends that context. With endCleanup, losing the lock also ends
// the cleanups of that context that publish (cleanup.PublishBound),
// before the context itself: a continuous backup must not store its last
// segment once another replica may follow the cluster; it still aborts
// its own uploads and removes its own temporary files.
func (s *Scheduler) whileHeld(ctx context.Context, held Held, what, jobID string, endCleanup bool) (context.Context, func(completed bool)) {
	ctx, cancel := context.WithCancelCause(ctx)
	// The release is bounded by the stop budget only: a lost lock's
	// lease may still be there to revoke.
	releaseCtx, end := ctx, context.CancelCauseFunc(func(error) {})
	if endCleanup {
		ctx, end = cleanup.PublishBound(ctx)
	}
	// The lock is watched until its release, not only until ctx ends: a
	// continuous backup stores its last segment after its cancellation.
	released := make(chan struct{})
	go func() {
		select {
		case <-held.Lost():
			end(errLockLost)
			cancel(errLockLost)
		case <-released:
		}
	}()
	return ctx, func(completed bool) {
		close(released)
		defer end(nil)
		rctx, rcancel := cleanup.Context(releaseCtx, releaseTimeout)
		defer rcancel()
		if err := held.Release(rctx, completed); err != nil {
			s.log.Warn(what+" release", "job", jobID, "err", err)
		}
		cancel(nil)
	}
}

func (s *Scheduler) backupAndPrune(ctx context.Context, job Job, tick time.Time) outcome {
	if err := s.runner.Backup(ctx, job, tick); err != nil {
		// Say why a cancelled run was cancelled: removed, stopped, or
		// its lock lost.
		if cause := context.Cause(ctx); cause != nil && cause != context.Canceled && !errors.Is(err, cause) {
			err = fmt.Errorf("%w: %w", cause, err)
		}
		return outcome{err: err}
	}
	if job.OneShot() {
		return outcome{}
	}
	return outcome{pruned: true, pruneErr: s.runner.Prune(ctx, job)}
}

// record updates e's status with a run's outcome. The caller holds s.mu.
func (s *Scheduler) record(e *entry, r *run, job Job, out outcome, end time.Time) {
	st := &e.status
	log := s.log.With("job", job.ID, "cluster", job.Cluster, "tick", r.tick, "kind", r.kind.String())
	if out.skip != "" {
		e.skip(out.skip, r.started)
		log.Info("run skipped", "reason", out.skip)
		return
	}
	st.LastRun, st.LastTick, st.LastDuration = r.started, r.tick, end.Sub(r.started)
	if out.err != nil {
		st.LastError = out.err
		st.ConsecutiveFailures++
		st.Failures++
		log.Warn("run failed", "err", out.err, "consecutiveFailures", st.ConsecutiveFailures)
		return
	}
	st.LastSuccess, st.LastError, st.ConsecutiveFailures = end, nil, 0
	st.Successes++
	if out.pruned {
		st.LastPruneError = out.pruneErr
		if out.pruneErr != nil {
			st.PruneFailures++
			log.Warn("retention failed", "err", out.pruneErr)
		}
	}
	log.Info("run succeeded", "duration", st.LastDuration)
}

// startCheck asks the Inventory when e last backed up, and queues a
// catch-up run if it missed a tick since. The caller holds s.mu.
func (s *Scheduler) startCheck(e *entry) {
	s.checking++
	job, ctx, wg := e.job, s.checkCtx, s.wg
	wg.Add(1)
	go func() {
		defer wg.Done()
		last, ok, err := s.inventory.LastBackup(ctx, job)
		now := s.clock.Now()
		s.mu.Lock()
		s.checking--
		e.check = false
		if !e.removed && !s.stopping {
			s.checked(e, last, ok, err, now)
		}
		s.mu.Unlock()
		s.signal()
	}()
}

// checked acts on the answer of e's Inventory check. The caller holds
// s.mu.
func (s *Scheduler) checked(e *entry, last time.Time, ok bool, err error, now time.Time) {
	log := s.log.With("job", e.job.ID, "cluster", e.job.Cluster)
	if e.sched == nil {
		switch {
		case e.oneShotDone || e.run != nil || e.due != nil:
		case err != nil:
			log.Warn("inventory check failed: running the one-shot job", "err", err)
			s.makeDue(e, time.Time{}, runOneShot, now)
		case ok:
			e.oneShotDone = true
			log.Info("one-shot job already backed up", "created", last)
		default:
			s.makeDue(e, time.Time{}, runOneShot, now)
		}
		return
	}
	switch {
	case e.run != nil || e.due != nil:
		// A tick came meanwhile.
	case err != nil:
		log.Warn("inventory check failed: no catch-up", "err", err)
	case !ok:
		log.Info("catch-up: never backed up")
		s.makeDue(e, time.Time{}, runCatchUp, now)
	default:
		// A tick is missed only once its jittered start has passed:
		// until then plan's timeline holds it, and a catch-up would run
		// it a second time.
		if missed := e.sched.next(last); !missed.IsZero() && !missed.Add(e.jitter).After(now) {
			log.Info("catch-up: a tick was missed", "lastBackup", last, "tick", missed)
			s.makeDue(e, missed, runCatchUp, now)
		}
	}
}

// shutdown stops the scheduler after its loop returned, within
// StopTimeout: see Start.
func (s *Scheduler) shutdown(cancelRuns context.CancelCauseFunc, cancelChecks context.CancelFunc) {
	s.mu.Lock()
	s.stopping = true
	for _, e := range s.queue {
		e.due = nil
	}
	s.queue = nil
	for _, e := range s.checks {
		e.check = false
	}
	s.checks = nil
	for _, e := range s.jobs {
		// Each stores what it holds and returns; wg waits for them. One
		// abandoned at the end of the budget stays on e as ending, for
		// Remove and the next follower of the job to wait for.
		if e.follow != nil {
			e.follow, e.ending = nil, e.follow
		}
	}
	s.cancelFollow()
	now := s.clock.Now()
	if s.inFlight > 0 {
		s.log.Info("scheduler stopping: waiting for runs in flight", "runs", s.inFlight, "timeout", s.stopTimeout)
	}
	// The runs may end until three quarters of the budget, and clean up
	// after their cancellation in the last quarter.
	stopCancel := s.clock.At(now.Add(s.stopTimeout-s.stopTimeout/4), func() { cancelRuns(errStopped) })
	spent := make(chan struct{})
	stopSpent := s.clock.At(now.Add(s.stopTimeout), func() { close(spent) })
	wg, endCleanup := s.wg, s.endCleanup
	s.mu.Unlock()

	cancelChecks()
	ended := make(chan struct{})
	go func() {
		wg.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-spent:
		// What still runs is abandoned as a killed process would leave
		// it: nothing it did not commit is visible.
		cancelRuns(errStopped)
		endCleanup(errStopBudget)
		s.mu.Lock()
		runs := s.inFlight
		s.mu.Unlock()
		s.log.Warn("scheduler stop budget spent: abandoning what has not ended", "timeout", s.stopTimeout, "runs", runs)
	}
	stopCancel()
	stopSpent()
	cancelRuns(nil)
	endCleanup(nil)

	s.mu.Lock()
	for _, e := range s.queue {
		e.due = nil // set while stopping; the next Start plans it again
	}
	s.queue = nil
	s.running, s.stopping = false, false
	s.runCtx, s.checkCtx, s.followCtx, s.endCleanup = nil, nil, nil, nil
	s.heartbeat = time.Time{}
	s.mu.Unlock()
	s.log.Info("scheduler stopped")
}

// location loads a time zone once per scheduler: a loaded location holds
// the zone's whole table, which thousands of jobs need not copy.
func (s *Scheduler) location(zone string) (*time.Location, error) {
	s.zoneMu.Lock()
	defer s.zoneMu.Unlock()
	if loc, ok := s.zones[zone]; ok {
		return loc, nil
	}
	loc, err := loadLocation(zone)
	if err != nil {
		return nil, err
	}
	s.zones[zone] = loc
	return loc, nil
}

// jitterOf returns the job's fixed delay in [0, max): a hash of its ID,
// in whole seconds when max is a second or more.
func jitterOf(id string, max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	// FNV-1a, then murmur3's finalizer so that IDs differing in their
	// last byte spread over the whole range.
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	d := time.Duration(h % uint64(max))
	if max >= time.Second {
		d = d.Truncate(time.Second)
	}
	return d
}

// timeline is a min-heap of entries by fire time (then ID, so that equal
// times fire in a stable order).
type timeline []*entry

func (t timeline) Len() int { return len(t) }
func (t timeline) Less(i, j int) bool {
	if c := t[i].fire.Compare(t[j].fire); c != 0 {
		return c < 0
	}
	return t[i].job.ID < t[j].job.ID
}
func (t timeline) Swap(i, j int) {
	t[i], t[j] = t[j], t[i]
	t[i].index, t[j].index = i, j
}
func (t *timeline) Push(x any) {
	e := x.(*entry)
	e.index = len(*t)
	*t = append(*t, e)
}
func (t *timeline) Pop() any {
	old := *t
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*t = old[:len(old)-1]
	e.index = -1
	return e
}

func (t *timeline) push(e *entry) { heap.Push(t, e) }

func (t *timeline) remove(e *entry) {
	if e.index >= 0 {
		heap.Remove(t, e.index)
	}
}
