//go:build unix

package schedule

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/schedule/scheduletest"
)

const benchJobs = 10_000

// benchJob is a realistic job: a namespaced ID, a time zone, two
// destinations and a GFS policy.
func benchJob(i int, expr string) Job {
	return Job{
		ID:           fmt.Sprintf("cluster-%05d/etcd-backup", i),
		Schedule:     expr,
		TimeZone:     "Europe/Berlin",
		Cluster:      fmt.Sprintf("cluster-%05d", i),
		Name:         "nightly",
		Destinations: []string{"s3-eu", "gcs-eu"},
		Retention:    retention.GFS(12),
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkIdle10kJobs sets 10,000 jobs whose next runs are months away on
// a scheduler on the real clock, reports the heap each job costs (its
// definition, parsed schedule and state, job strings included), then runs
// the scheduler for the benchmark time and reports the CPU the whole
// process used meanwhile.
func BenchmarkIdle10kJobs(b *testing.B) {
	before := heapInUse()
	s, err := New(Config{Runner: RunnerFuncs{}})
	if err != nil {
		b.Fatal(err)
	}
	for i := range benchJobs {
		if err := s.Set(benchJob(i, "0 3 1 1 *")); err != nil {
			b.Fatal(err)
		}
	}
	perJob := float64(heapInUse()-before) / benchJobs

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Start(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for !s.loopIdle() {
		if time.Now().After(deadline) {
			b.Fatal("scheduler did not start")
		}
		time.Sleep(time.Millisecond)
	}
	runtime.GC()

	cpu0, wall0 := cpuTime(b), time.Now()
	for b.Loop() {
		time.Sleep(100 * time.Millisecond)
	}
	cpu, wall := cpuTime(b)-cpu0, time.Since(wall0)
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	runtime.KeepAlive(s)
	b.ReportMetric(perJob, "heap-bytes/job")
	b.ReportMetric(float64(cpu.Microseconds())/wall.Seconds(), "cpu-µs/s")
	b.ReportMetric(wall.Seconds(), "idle-s")
}

// BenchmarkIdleBaseline is BenchmarkIdle10kJobs without a scheduler: the
// CPU the test process uses anyway, to subtract.
func BenchmarkIdleBaseline(b *testing.B) {
	runtime.GC()
	cpu0, wall0 := cpuTime(b), time.Now()
	for b.Loop() {
		time.Sleep(100 * time.Millisecond)
	}
	cpu, wall := cpuTime(b)-cpu0, time.Since(wall0)
	b.ReportMetric(float64(cpu.Microseconds())/wall.Seconds(), "cpu-µs/s")
	b.ReportMetric(wall.Seconds(), "idle-s")
}

// BenchmarkSet measures Set of a new job into a scheduler of 10,000 jobs
// (validation, schedule parsing, next run).
func BenchmarkSet(b *testing.B) {
	s, err := New(Config{Runner: RunnerFuncs{}})
	if err != nil {
		b.Fatal(err)
	}
	for i := range benchJobs {
		if err := s.Set(benchJob(i, "30 2 * * *")); err != nil {
			b.Fatal(err)
		}
	}
	i := benchJobs
	for b.Loop() {
		if err := s.Set(benchJob(i, "30 2 * * *")); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkTick10kJobs fires one tick of 10,000 @hourly jobs at the same
// instant (no jitter), with a runner that does nothing, and waits until
// all have run: the scheduler's own cost of a busy tick.
func BenchmarkTick10kJobs(b *testing.B) {
	clk := scheduletest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s, err := New(Config{Runner: RunnerFuncs{}, Clock: clk, MaxConcurrent: 64, MaxPerDestination: 64})
	if err != nil {
		b.Fatal(err)
	}
	for i := range benchJobs {
		if err := s.Set(benchJob(i, "@hourly")); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Start(ctx) }()
	for !s.quiet() {
		time.Sleep(time.Millisecond)
	}
	for b.Loop() {
		clk.Advance(time.Hour)
		for !s.quiet() {
			time.Sleep(100 * time.Microsecond)
		}
	}
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchJobs, "ns/job")
}
