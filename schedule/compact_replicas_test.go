package schedule

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/schedule/scheduletest"
)

// syntheticCount counts the synthetic full backups of prod-a on dest.
func syntheticCount(t *testing.T, dests memDestinations, dest string) int {
	t.Helper()
	n := 0
	for _, e := range backupsOf(t, dests[dest], "prod-a") {
		if e.Manifest.IsSynthetic() {
			n++
		}
	}
	return n
}

// startScheduler starts s until the test ends or stop is called.
func startScheduler(t *testing.T, s *Scheduler) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	stop = sync.OnceFunc(func() { cancel(); require.NoError(t, <-done) })
	t.Cleanup(stop)
	return stop
}

// TestStandbyReplicaDoesNotCompact: two replicas share the lock; only the
// one that follows compacts, so one interval on each stores one synthetic
// full backup, not two.
func TestStandbyReplicaDoesNotCompact(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := newEtcdClient(t, srv)
	defer cli.Close()
	dests := newMemDestinations(t, "a", "b")
	var clks [2]*scheduletest.Clock
	var ss [2]*Scheduler
	j := continuousJob()
	j.Continuous.CompactInterval = time.Minute
	for i := range 2 {
		clks[i] = scheduletest.NewClock(utc("2026-01-01T00:00:00Z"))
		s, err := New(Config{Runner: etcdRunner(t, srv, dests), Lock: &EtcdLock{Client: cli, Prefix: "/locks/"}, Clock: clks[i], Logger: testLogger(t)})
		require.NoError(t, err)
		ss[i] = s
		startScheduler(t, s)
		require.NoError(t, s.Set(j))
	}
	eventually(t, func() bool {
		a, _ := ss[0].Get(j.ID)
		b, _ := ss[1].Get(j.ID)
		return a.Following || b.Following
	}, "one replica follows")
	leader := 0
	if st, _ := ss[1].Get(j.ID); st.Following {
		leader = 1
	}
	standby := 1 - leader
	// The standby's interval first: it must not compact.
	rev := put(t, cli, 20)
	waitCommitted(t, dests, rev)
	clks[standby].Advance(time.Minute)
	clks[leader].Advance(time.Minute)
	eventually(t, func() bool { st, _ := ss[leader].Get(j.ID); return st.Compactions == 1 }, "the following replica compacted")
	// The standby had its turn before the leader's compaction was
	// stored; give it another with something new to compact.
	rev = put(t, cli, 20)
	waitCommitted(t, dests, rev)
	clks[standby].Advance(time.Minute)
	st, _ := ss[standby].Get(j.ID)
	require.False(t, st.Following)
	require.Zero(t, st.Compactions, "the standby replica compacted")
	require.Equal(t, 1, syntheticCount(t, dests, "a"), "synthetic full backups after an interval on each replica")
}

// TestCompactionIntervalFollowsTheCatalog: a scheduler started again
// compacts an interval after the newest synthetic full backup on the
// destinations, not an interval after its own start.
func TestCompactionIntervalFollowsTheCatalog(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := newEtcdClient(t, srv)
	defer cli.Close()
	dests := newMemDestinations(t, "a", "b")
	// Backups are dated by real time moved on as far as the scheduler's
	// clock was: the follower flushes on real time, the compaction is
	// due on the clock. The clock starts in the first minute of an hour
	// at least an hour back, and the test moves it 25 minutes: no backup
	// is dated after real time (the compactor looks for what to compact
	// at time.Now(), where a chain dated later is not there yet), and the
	// job's hourly run, whose lock a compaction skips, never comes.
	realStart := time.Now()
	start := realStart.Add(-2 * time.Hour).Truncate(time.Hour).Add(time.Minute)
	back := realStart.Sub(start)
	clk := scheduletest.NewClock(start)
	r := etcdRunner(t, srv, dests)
	r.Now = func() time.Time { return time.Now().Add(clk.Now().Sub(start) - back) }
	j := continuousJob()
	j.Continuous.CompactInterval = 10 * time.Minute
	newScheduler := func() *Scheduler {
		s, err := New(Config{Runner: r, Lock: &EtcdLock{Client: cli, Prefix: "/locks/"}, Clock: clk, Logger: testLogger(t)})
		require.NoError(t, err)
		return s
	}
	s1 := newScheduler()
	stop1 := startScheduler(t, s1)
	require.NoError(t, s1.Set(j))
	eventually(t, func() bool { st, _ := s1.Get(j.ID); return st.Following }, "the job follows etcd")
	waitCommitted(t, dests, put(t, cli, 20))
	clk.Advance(10 * time.Minute)
	eventually(t, func() bool { st, _ := s1.Get(j.ID); return st.Compactions == 1 }, "the chain was compacted")
	stop1()

	clk.Advance(6 * time.Minute) // the process was down
	s2 := newScheduler()
	startScheduler(t, s2)
	require.NoError(t, s2.Set(j))
	eventually(t, func() bool { st, _ := s2.Get(j.ID); return st.Following }, "the job follows etcd again")
	waitCommitted(t, dests, put(t, cli, 20))
	// An interval after the synthetic full backup (dated a little later
	// than the clock read), five minutes after this start.
	clk.Advance(5 * time.Minute)
	// The synthetic full backup is dated later than the clock read, by
	// the real time the test took; a compaction waiting for a run slot
	// retries on the clock. Move it a minute at a time, to 25 minutes at
	// most, before the interval from this start would end: each time once
	// the compaction is done or waits on the clock beside the loop's
	// wake-up (a minute ahead at most), never while it runs.
	compacted := func() bool { st, _ := s2.Get(j.ID); return st.Compactions == 1 }
	for range 4 {
		eventually(t, func() bool { return compacted() || clk.Pending() >= 2 }, "compacted, or the compaction waiting on the clock")
		if compacted() {
			break
		}
		clk.Advance(time.Minute)
	}
	eventually(t, compacted, "compacted an interval after the last compaction")
	require.Equal(t, 2, syntheticCount(t, dests, "a"))
}

// scriptedCompactor is a CompactingRunner whose compactions return errs in
// turn and then block until ctx ends.
type scriptedCompactor struct {
	followOnly
	mu    sync.Mutex
	errs  []error
	calls int
}

func (r *scriptedCompactor) Compact(ctx context.Context, _ Job) error {
	r.mu.Lock()
	r.calls++
	if len(r.errs) == 0 {
		r.mu.Unlock()
		<-ctx.Done()
		return ctx.Err()
	}
	err := r.errs[0]
	r.errs = r.errs[1:]
	r.mu.Unlock()
	return err
}

func (r *scriptedCompactor) LastCompaction(context.Context, Job) (time.Time, error) {
	return time.Time{}, nil
}

func (r *scriptedCompactor) called() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

// TestCompactionSkippedForALockKeepsTheError: a compaction skipped because
// a run holds the job's lock says nothing about the last failure, which
// stays in the status.
func TestCompactionSkippedForALockKeepsTheError(t *testing.T) {
	boom := errors.New("boom")
	r := &scriptedCompactor{errs: []error{boom, ErrLocked}}
	clk := scheduletest.NewClock(utc("2026-01-01T00:00:00Z"))
	s, err := New(Config{Runner: r, Clock: clk, Logger: testLogger(t)})
	require.NoError(t, err)
	startScheduler(t, s)
	j := continuousJob()
	j.Continuous.CompactInterval = time.Minute
	require.NoError(t, s.Set(j))
	eventually(t, func() bool { st, _ := s.Get(j.ID); return st.Following }, "the job follows")
	for n := 1; n <= 3; n++ {
		// Each interval, once the supervisor waits for it: beside the
		// loop's wake-up, which is always a minute ahead at most. Before,
		// the supervisor would read the clock moved already, and wait an
		// interval from there.
		eventually(t, func() bool { return clk.Pending() >= 2 }, "waiting for the interval")
		clk.Advance(time.Minute)
		eventually(t, func() bool { return r.called() == n }, "compaction attempted")
	}
	st, _ := s.Get(j.ID)
	require.ErrorIs(t, st.CompactError, boom)
}
