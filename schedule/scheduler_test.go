package schedule

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
)

// TestFiresAcrossDaylightSaving drives a `30 2 * * *` job and an @hourly
// job in Europe/Berlin over both changes of 2026, in 15-minute steps, and
// checks every run's tick and start time.
func TestFiresAcrossDaylightSaving(t *testing.T) {
	tests := []struct {
		name       string
		from, to   string
		wantDaily  []time.Time
		wantHourly int // runs of the @hourly job
		// hourlyAround are the hourly ticks expected around the change.
		hourlyAround []time.Time
	}{
		{
			name: "clocks go forward on 2026-03-29",
			from: "2026-03-28T12:00:00Z", to: "2026-03-30T06:00:00Z",
			wantDaily: utcs(
				"2026-03-29T01:00:00Z", // 02:30 did not exist: at the end of the gap, 03:00 CEST
				"2026-03-30T00:30:00Z", // 02:30 CEST
			),
			wantHourly: 42, // one per real hour
			hourlyAround: utcs(
				"2026-03-29T00:00:00Z", // 01:00 CET
				"2026-03-29T01:00:00Z", // 03:00 CEST
				"2026-03-29T02:00:00Z", // 04:00 CEST
			),
		},
		{
			name: "clocks go back on 2026-10-25",
			from: "2026-10-24T12:00:00Z", to: "2026-10-26T06:00:00Z",
			wantDaily: utcs(
				"2026-10-25T00:30:00Z", // 02:30 CEST, and not again at 02:30 CET
				"2026-10-26T01:30:00Z", // 02:30 CET
			),
			wantHourly: 42,
			hourlyAround: utcs(
				"2026-10-24T23:00:00Z", // 01:00 CEST
				"2026-10-25T00:00:00Z", // 02:00 CEST
				"2026-10-25T01:00:00Z", // 02:00 CET
				"2026-10-25T02:00:00Z", // 03:00 CET
			),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			noLeaks(t)
			h := newHarness(t, utc(tt.from), Config{})
			daily := job("daily", "30 2 * * *")
			daily.TimeZone = "Europe/Berlin"
			hourly := job("hourly", "@hourly")
			hourly.TimeZone = "Europe/Berlin"
			require.NoError(t, h.s.Set(daily))
			require.NoError(t, h.s.Set(hourly))
			h.start()
			for now := utc(tt.from); !now.After(utc(tt.to)); now = now.Add(15 * time.Minute) {
				h.advanceTo(now)
			}

			var dailyTicks []time.Time
			for _, c := range h.rec.callsOf("daily") {
				assert.True(t, c.at.Equal(c.tick), "daily run at %v for tick %v", c.at, c.tick)
				dailyTicks = append(dailyTicks, c.tick.UTC())
			}
			assert.Equal(t, tt.wantDaily, dailyTicks)

			hourlyCalls := h.rec.callsOf("hourly")
			assert.Len(t, hourlyCalls, tt.wantHourly)
			var around []time.Time
			for i, c := range hourlyCalls {
				assert.True(t, c.at.Equal(c.tick))
				if i > 0 {
					assert.Equal(t, time.Hour, c.tick.Sub(hourlyCalls[i-1].tick), "hourly runs are an hour of real time apart")
				}
				if !c.tick.Before(tt.hourlyAround[0]) && !c.tick.After(tt.hourlyAround[len(tt.hourlyAround)-1]) {
					around = append(around, c.tick.UTC())
				}
			}
			assert.Equal(t, tt.hourlyAround, around)
			require.NoError(t, h.stop())
		})
	}
}

func TestSetReconciles(t *testing.T) {
	noLeaks(t)
	start := utc("2026-01-01T10:00:00Z")
	h := newHarness(t, start, Config{})
	j := job("j", "@daily")
	require.NoError(t, h.s.Set(j))
	h.start()
	assert.Equal(t, utc("2026-01-02T00:00:00Z"), h.status("j").NextRun.UTC())

	// Unchanged: a no-op, even with equal slices that are not the same.
	h.clk.Set(utc("2026-01-01T11:00:00Z"))
	same := job("j", "@daily")
	same.Destinations = []string{"s3"}
	require.NoError(t, h.s.Set(same))
	h.settle()
	assert.Equal(t, utc("2026-01-02T00:00:00Z"), h.status("j").NextRun.UTC())

	// A new schedule takes effect from now.
	require.NoError(t, h.s.Set(job("j", "0 12 * * *")))
	h.settle()
	assert.Equal(t, utc("2026-01-01T12:00:00Z"), h.status("j").NextRun.UTC())

	// Another change (destinations) keeps the time and applies to the
	// next run.
	moved := job("j", "0 12 * * *")
	moved.Destinations = []string{"gcs"}
	require.NoError(t, h.s.Set(moved))
	h.settle()
	assert.Equal(t, utc("2026-01-01T12:00:00Z"), h.status("j").NextRun.UTC())

	var dests [][]string
	h.rec.setHook(func(_ context.Context, job Job, _ time.Time) error {
		dests = append(dests, job.Destinations)
		return nil
	})
	h.advanceTo(utc("2026-01-01T12:00:00Z"))
	h.advanceTo(utc("2026-01-02T00:00:00Z")) // the old schedule's time: nothing
	h.advanceTo(utc("2026-01-02T12:00:00Z"))
	var ticks []time.Time
	for _, c := range h.rec.callsOf("j") {
		ticks = append(ticks, c.tick.UTC())
	}
	assert.Equal(t, utcs("2026-01-01T12:00:00Z", "2026-01-02T12:00:00Z"), ticks)
	assert.Equal(t, [][]string{{"gcs"}, {"gcs"}}, dests)

	// A time zone change is a schedule change.
	zoned := moved
	zoned.TimeZone = "America/New_York"
	require.NoError(t, h.s.Set(zoned))
	assert.Equal(t, utc("2026-01-02T17:00:00Z"), h.status("j").NextRun.UTC())
	require.NoError(t, h.stop())
}

func TestSetRefusesInvalidJobs(t *testing.T) {
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{})
	bad := job("j", "61 * * * *")
	err := h.s.Set(bad)
	require.ErrorIs(t, err, ErrInvalidSchedule)
	var se *ScheduleError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "61 * * * *", se.Value)
	assert.Empty(t, h.s.List(), "a refused job is not set")

	require.NoError(t, h.s.Set(job("j", "@daily")))
	zone := job("j", "@hourly")
	zone.TimeZone = "Mars/Olympus_Mons"
	require.ErrorIs(t, h.s.Set(zone), ErrInvalidTimeZone)
	assert.Equal(t, "@daily", h.s.List()[0].Job.Schedule, "a refused update leaves the job as it was")
}

// TestRemoveDuringRun: removing a job cancels its run in flight and waits
// for it; nothing of the job runs afterwards.
func TestRemoveDuringRun(t *testing.T) {
	noLeaks(t)
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{})
	started := make(chan struct{})
	h.rec.setHook(func(ctx context.Context, job Job, _ time.Time) error {
		if job.ID != "j" {
			return nil
		}
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	require.NoError(t, h.s.Set(job("j", "@hourly")))
	require.NoError(t, h.s.Set(job("other", "@hourly")))
	h.start()
	h.clk.Set(utc("2026-01-01T01:00:00Z"))
	<-started

	require.NoError(t, h.s.Remove(context.Background(), "j"))
	calls := h.rec.callsOf("j")
	require.Len(t, calls, 1)
	assert.ErrorIs(t, calls[0].err, errRemoved, "the run saw its context cancelled because of the removal")
	_, ok := h.s.Get("j")
	assert.False(t, ok)
	assert.NotContains(t, h.rec.pruned(), "j")

	h.settle()
	for i := 2; i <= 5; i++ {
		h.advanceTo(utc("2026-01-01T00:00:00Z").Add(time.Duration(i) * time.Hour))
	}
	assert.Len(t, h.rec.callsOf("j"), 1, "nothing runs after Remove")
	assert.Len(t, h.rec.callsOf("other"), 5, "other jobs go on")
	require.NoError(t, h.s.Remove(context.Background(), "missing"))
	require.NoError(t, h.stop())
}

// TestRemoveGivesUpWaiting: a run that ignores its cancellation makes
// Remove return ctx's error; the job still never runs again.
func TestRemoveGivesUpWaiting(t *testing.T) {
	noLeaks(t)
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{})
	started, release := make(chan struct{}), make(chan struct{})
	h.rec.setHook(func(ctx context.Context, _ Job, _ time.Time) error {
		close(started)
		<-release
		return nil
	})
	require.NoError(t, h.s.Set(job("j", "@hourly")))
	h.start()
	h.clk.Set(utc("2026-01-01T01:00:00Z"))
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := h.s.Remove(ctx, "j")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(release)
	h.settle()
	h.advanceTo(utc("2026-01-01T05:00:00Z"))
	assert.Len(t, h.rec.callsOf("j"), 1)
	require.NoError(t, h.stop())
}

// TestNoOverlap: a tick due while the job's previous run is in flight is
// skipped and recorded.
func TestNoOverlap(t *testing.T) {
	noLeaks(t)
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{})
	started, release := make(chan struct{}, 1), make(chan struct{})
	h.rec.setHook(func(ctx context.Context, _ Job, _ time.Time) error {
		started <- struct{}{}
		<-release
		return nil
	})
	require.NoError(t, h.s.Set(job("j", "@every 1m")))
	h.start()
	h.clk.Set(utc("2026-01-01T00:01:00Z"))
	<-started
	for _, at := range []string{"2026-01-01T00:02:00Z", "2026-01-01T00:03:00Z"} {
		h.clk.Set(utc(at))
		eventually(t, h.s.loopIdle, "loop idle")
	}
	st := h.status("j")
	assert.True(t, st.Running)
	assert.EqualValues(t, 2, st.SkippedRuns)
	assert.Equal(t, SkipOverlap, st.LastSkipReason)
	assert.Equal(t, utc("2026-01-01T00:03:00Z"), st.LastSkip.UTC())

	h.rec.setHook(nil)
	close(release)
	h.settle()
	h.advanceTo(utc("2026-01-01T00:04:00Z"))
	assert.Len(t, h.rec.callsOf("j"), 2)
	assert.Zero(t, h.rec.overlaps)
	st = h.status("j")
	assert.False(t, st.Running)
	assert.EqualValues(t, 2, st.Successes)
	assert.EqualValues(t, 2, st.SkippedRuns)
	require.NoError(t, h.stop())
}

// TestOneShot: a job without a schedule runs once, as soon as the
// scheduler runs, and never again.
func TestOneShot(t *testing.T) {
	noLeaks(t)
	set := utc("2026-01-01T00:00:00Z")
	h := newHarness(t, set, Config{})
	once := job("once", "")
	require.NoError(t, h.s.Set(once))
	assert.Equal(t, set, h.status("once").NextRun, "before Start: as soon as it starts")
	h.start()
	calls := h.rec.callsOf("once")
	require.Len(t, calls, 1)
	assert.True(t, calls[0].tick.IsZero())
	assert.Empty(t, h.rec.pruned(), "one-shot jobs do not prune")
	st := h.status("once")
	assert.True(t, st.NextRun.IsZero())
	assert.EqualValues(t, 1, st.Successes)

	// Setting it again, changed or not, does not run it again.
	require.NoError(t, h.s.Set(once))
	renamed := once
	renamed.Name = "other"
	require.NoError(t, h.s.Set(renamed))
	h.settle()
	h.advanceTo(set.Add(72 * time.Hour))
	require.NoError(t, h.stop())
	h.start()
	assert.Len(t, h.rec.callsOf("once"), 1, "not after a restart either")

	// A one-shot job set while running runs at once; so does a scheduled
	// job that becomes one-shot.
	require.NoError(t, h.s.Set(job("later", "")))
	h.settle()
	assert.Len(t, h.rec.callsOf("later"), 1)
	require.NoError(t, h.s.Set(job("was-daily", "@daily")))
	require.NoError(t, h.s.Set(job("was-daily", "")))
	h.settle()
	assert.Len(t, h.rec.callsOf("was-daily"), 1)
	require.NoError(t, h.stop())
}

// TestRetentionAfterSuccess: Prune follows each successful backup of a
// scheduled job, never a failed one; a failed prune does not fail the
// run.
func TestRetentionAfterSuccess(t *testing.T) {
	noLeaks(t)
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{})
	fail := errors.New("snapshot: no member")
	results := []error{nil, fail, fail, nil}
	h.rec.setHook(func(context.Context, Job, time.Time) error {
		err := results[0]
		results = results[1:]
		return err
	})
	j := job("j", "@hourly")
	j.Retention = retention.KeepLast(3)
	require.NoError(t, h.s.Set(j))
	h.start()

	h.advanceTo(utc("2026-01-01T01:00:00Z"))
	assert.Equal(t, []string{"j"}, h.rec.pruned())
	st := h.status("j")
	assert.Equal(t, utc("2026-01-01T01:00:00Z"), st.LastSuccess.UTC())
	assert.NoError(t, st.LastError)

	h.advanceTo(utc("2026-01-01T02:00:00Z"))
	h.advanceTo(utc("2026-01-01T03:00:00Z"))
	assert.Equal(t, []string{"j"}, h.rec.pruned(), "no prune after a failure")
	st = h.status("j")
	assert.ErrorIs(t, st.LastError, fail)
	assert.Equal(t, 2, st.ConsecutiveFailures)
	assert.EqualValues(t, 2, st.Failures)
	assert.Equal(t, utc("2026-01-01T03:00:00Z"), st.LastRun.UTC())
	assert.Equal(t, utc("2026-01-01T01:00:00Z"), st.LastSuccess.UTC())

	pruneFail := errors.New("list: unreachable")
	h.rec.mu.Lock()
	h.rec.pruneErr = pruneFail
	h.rec.mu.Unlock()
	h.advanceTo(utc("2026-01-01T04:00:00Z"))
	st = h.status("j")
	assert.NoError(t, st.LastError)
	assert.Zero(t, st.ConsecutiveFailures)
	assert.EqualValues(t, 2, st.Successes)
	assert.ErrorIs(t, st.LastPruneError, pruneFail)
	assert.EqualValues(t, 1, st.PruneFailures)
	assert.Equal(t, []string{"j", "j"}, h.rec.pruned())
	require.NoError(t, h.stop())
}

func TestJitter(t *testing.T) {
	const n = 300
	maxJitter := 5 * time.Minute
	seconds := map[time.Duration]bool{}
	for i := range n {
		id := fmt.Sprintf("cluster-%03d", i)
		d := jitterOf(id, maxJitter)
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.Less(t, d, maxJitter)
		require.Equal(t, d, jitterOf(id, maxJitter), "deterministic")
		require.Zero(t, d%time.Second)
		seconds[d] = true
	}
	// 300 jobs over 300 seconds: a uniform spread leaves about 190
	// distinct seconds; a hash that clusters leaves far fewer.
	assert.Greater(t, len(seconds), 150)
	assert.Zero(t, jitterOf("x", 0))

	// The scheduler runs a job its jitter after the tick, and reports
	// the tick itself.
	noLeaks(t)
	h := newHarness(t, utc("2026-01-01T00:30:00Z"), Config{MaxJitter: maxJitter}) // past the 00:00 tick's jitter
	require.NoError(t, h.s.Set(job("cluster-007", "@hourly")))
	h.start()
	d := jitterOf("cluster-007", maxJitter)
	require.NotZero(t, d)
	next := h.status("cluster-007").NextRun
	assert.Equal(t, utc("2026-01-01T01:00:00Z").Add(d), next.UTC())
	h.advanceTo(next.Add(-time.Second))
	assert.Zero(t, h.rec.count())
	h.advanceTo(next)
	calls := h.rec.callsOf("cluster-007")
	require.Len(t, calls, 1)
	assert.Equal(t, utc("2026-01-01T01:00:00Z"), calls[0].tick.UTC())
	assert.Equal(t, next, calls[0].at)
	assert.Equal(t, utc("2026-01-01T02:00:00Z").Add(d), h.status("cluster-007").NextRun.UTC())
	require.NoError(t, h.stop())
}

func TestStartTwice(t *testing.T) {
	noLeaks(t)
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{})
	assert.True(t, h.s.NeedLeaderElection())
	h.start()
	assert.ErrorIs(t, h.s.Start(context.Background()), ErrRunning)
	require.NoError(t, h.stop())
	// Started again after it returned, and with a context already ended.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, h.s.Start(ctx))
}

// TestMissedTicksCollapse: when the loop wakes up late (the process was
// paused), the ticks it missed make one run, not a burst.
func TestMissedTicksCollapse(t *testing.T) {
	noLeaks(t)
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{})
	require.NoError(t, h.s.Set(job("j", "*/10 * * * *")))
	h.start()
	// Paused from before the first tick to 01:05: the ticks from 00:10 to
	// 01:00 are one run. (With Set, the scheduler could see 00:10, run
	// that tick on time and wait for 00:20 after the clock had passed it:
	// a pause from 00:10 on, whose ticks collapse into a second run.)
	h.jumpTo(utc("2026-01-01T01:05:00Z"))
	calls := h.rec.callsOf("j")
	require.Len(t, calls, 1)
	assert.Equal(t, utc("2026-01-01T00:10:00Z"), calls[0].tick.UTC(), "the first tick missed")
	assert.Equal(t, utc("2026-01-01T01:10:00Z"), h.status("j").NextRun.UTC())
	require.NoError(t, h.stop())
}

// TestSettleSeesALateLoop: the harness's settle does not pass while the
// loop has a tick due that it has not seen. The loop can take a wake-up
// sent before its last pass (whose signal it already counted), cancel its
// clock call, and wait for a core before it takes s.mu: a clock moved then
// calls nothing, and the loop looks idle with nothing unseen. Only the
// time it waits for, behind the clock, tells. (TestFiresAcrossDaylightSaving
// failed this way on a busy machine.)
func TestSettleSeesALateLoop(t *testing.T) {
	noLeaks(t)
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{})
	require.NoError(t, h.s.Set(job("j", "@hourly")))
	h.start()

	h.s.mu.Lock() // the loop, once woken, waits here as if for a core
	h.s.wake <- struct{}{}
	eventually(t, func() bool { return h.clk.Pending() == 0 }, "the loop cancelled its clock call")
	h.clk.Set(utc("2026-01-01T01:00:00Z"))
	idle := h.s.loopIdleLocked()
	h.s.mu.Unlock()
	assert.False(t, idle, "a tick is due: the loop is not idle")

	h.settle()
	calls := h.rec.callsOf("j")
	require.Len(t, calls, 1)
	assert.Equal(t, utc("2026-01-01T01:00:00Z"), calls[0].at.UTC(), "run on time")
	require.NoError(t, h.stop())
}

func TestConfigValidate(t *testing.T) {
	runner := RunnerFuncs{}
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"minimal", Config{Runner: runner}, true},
		{"full", Config{Runner: runner, MaxConcurrent: 8, MaxPerDestination: 3, MaxJitter: time.Minute, StopTimeout: time.Second}, true},
		{"no runner", Config{}, false},
		{"negative concurrency", Config{Runner: runner, MaxConcurrent: -1}, false},
		{"negative per destination", Config{Runner: runner, MaxPerDestination: -1}, false},
		{"negative jitter", Config{Runner: runner, MaxJitter: -time.Second}, false},
		{"negative stop timeout", Config{Runner: runner, StopTimeout: -time.Second}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			_, newErr := New(tt.cfg)
			if tt.ok {
				assert.NoError(t, err)
				assert.NoError(t, newErr)
			} else {
				assert.ErrorIs(t, err, ErrInvalidConfig)
				assert.ErrorIs(t, newErr, ErrInvalidConfig)
			}
		})
	}
}

func TestJobValidate(t *testing.T) {
	valid := func(mod func(*Job)) Job {
		j := Job{ID: "ns/prod-a", Schedule: "0 3 * * *", Cluster: "prod-a", Name: "nightly", Destinations: []string{"s3", "gcs"}}
		mod(&j)
		return j
	}
	tests := []struct {
		name string
		job  Job
		want []error // nil: valid
	}{
		{"five fields", valid(func(*Job) {}), nil},
		{"seconds field", valid(func(j *Job) { j.Schedule = "30 0 3 * * *" }), nil},
		{"descriptor", valid(func(j *Job) { j.Schedule = "@daily" }), nil},
		{"every", valid(func(j *Job) { j.Schedule = "@every 6h" }), nil},
		{"names", valid(func(j *Job) { j.Schedule = "0 3 * JAN-MAR MON-FRI" }), nil},
		{"one-shot", valid(func(j *Job) { j.Schedule = "" }), nil},
		{"time zone", valid(func(j *Job) { j.TimeZone = "Europe/Berlin" }), nil},
		{"policy", valid(func(j *Job) { j.Retention = retention.GFS(12) }), nil},
		{"too few fields", valid(func(j *Job) { j.Schedule = "0 3 * *" }), []error{ErrInvalidJob, ErrInvalidSchedule}},
		{"too many fields", valid(func(j *Job) { j.Schedule = "0 0 3 * * * *" }), []error{ErrInvalidSchedule}},
		{"out of range", valid(func(j *Job) { j.Schedule = "0 25 * * *" }), []error{ErrInvalidSchedule}},
		{"unknown descriptor", valid(func(j *Job) { j.Schedule = "@fortnightly" }), []error{ErrInvalidSchedule}},
		{"every garbage", valid(func(j *Job) { j.Schedule = "@every soon" }), []error{ErrInvalidSchedule}},
		{"every negative", valid(func(j *Job) { j.Schedule = "@every -1h" }), []error{ErrInvalidSchedule}},
		{"every sub-second", valid(func(j *Job) { j.Schedule = "@every 10ms" }), []error{ErrInvalidSchedule}},
		{"never fires", valid(func(j *Job) { j.Schedule = "0 0 30 2 *" }), []error{ErrInvalidSchedule}},
		{"blank", valid(func(j *Job) { j.Schedule = "  " }), []error{ErrInvalidSchedule}},
		{"zone in expression", valid(func(j *Job) { j.Schedule = "CRON_TZ=Europe/Berlin 0 3 * * *" }), []error{ErrInvalidSchedule}},
		{"unknown zone", valid(func(j *Job) { j.TimeZone = "Europe/Atlantis" }), []error{ErrInvalidJob, ErrInvalidTimeZone}},
		{"local zone", valid(func(j *Job) { j.TimeZone = "Local" }), []error{ErrInvalidTimeZone}},
		{"empty ID", valid(func(j *Job) { j.ID = "" }), []error{ErrInvalidJob}},
		{"control in ID", valid(func(j *Job) { j.ID = "a\nb" }), []error{ErrInvalidJob}},
		{"long ID", valid(func(j *Job) { j.ID = string(make([]byte, MaxIDLen+1)) }), []error{ErrInvalidJob}},
		{"bad cluster", valid(func(j *Job) { j.Cluster = "Prod_A" }), []error{ErrInvalidJob, backup.ErrInvalidName}},
		{"bad name", valid(func(j *Job) { j.Name = "../x" }), []error{backup.ErrInvalidName}},
		{"no destination", valid(func(j *Job) { j.Destinations = nil }), []error{ErrInvalidJob}},
		{"bad destination", valid(func(j *Job) { j.Destinations = []string{"s3/x"} }), []error{backup.ErrInvalidName}},
		{"twice the same destination", valid(func(j *Job) { j.Destinations = []string{"s3", "s3"} }), []error{ErrInvalidJob}},
		{"bad compression", valid(func(j *Job) { j.Compression = "lz4" }), []error{backup.ErrUnknownCompression}},
		{"bad recipient", valid(func(j *Job) { j.Encryption.Recipients = []string{"not-a-key"} }), []error{backup.ErrInvalidRecipient}},
		{"bad policy", valid(func(j *Job) { j.Retention.KeepLast = -1 }), []error{retention.ErrInvalidPolicy}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.job.Validate()
			if tt.want == nil {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			var je *JobError
			require.ErrorAs(t, err, &je)
			assert.Equal(t, tt.job.ID, je.ID)
			for _, w := range tt.want {
				assert.ErrorIs(t, err, w)
			}
		})
	}
}
