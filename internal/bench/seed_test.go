//go:build !benchlean

package main

import (
	"math"
	"runtime/metrics"
	"strings"
	"testing"
	"time"
)

// TestRenderSeed: the seed-scale table judges every target from the
// results, says why a missed one was missed, and says when the mode did
// not run.
func TestRenderSeed(t *testing.T) {
	if got := renderSeed(nil, 2); !strings.Contains(got, "Not measured by this run") {
		t.Errorf("no results: %q", got)
	}
	p := &seedReport{Jobs: 1000, Etcds: 10, Writes: 10, Slots: 4, Phase: 2 * time.Minute, Base: 40 << 20,
		StartupPeak: 900 << 20, SteadyPeak: 1100 << 20, SteadyEnd: 800 << 20, Segments: 5000,
		LagP50: time.Second, LagP99: 3 * time.Second, LagMax: 4 * time.Second, CPU: 180, Fulls: 1000, MaxFulls: 4}
	got := renderSeed(p, 2)
	for _, w := range []string{
		"| start-up peak RSS (VmHWM) | 900 MiB", "<= 1.5 GiB: met |",
		"| steady RSS, peak of the phase (end) | 1.1 GiB (800 MiB)", "<= 1 GiB: **missed** |",
		"| commit lag p99 | 3s | <= 2s: **missed** |",
		"| full backups taken during the start-up; most in flight at once | 1000; 4 | <= the run slots (4): met |",
		"| CPU per follower under writes | 0.150% of a core (the process: 1.50 cores) |",
		"The commit lag missed its target: the process used 1.50 of the machine's 2 cores",
		"The RSS missed its target",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("seed section lacks %q:\n%s", w, got)
		}
	}
	// With the machine's CPU measured, the note says where it went and
	// which of the CPU and the store the segments waited for.
	p.Busy, p.EtcdCPU, p.IOWait, p.MachineCPUs, p.GOMAXPROCS = 236, 36, 2.4, 2, 2
	got = renderSeed(p, 2)
	for _, w := range []string{
		"| the machine's CPU during the phase | 1.97 of 2 cores busy: the process 1.50, the 10 etcd processes 0.30, the rest (the kernel's writeback among it) 0.17; 0.02 cores idle waiting for the disk |",
		"| the process' CPU during the phase per committed segment (watching, encoding and the writers' clients included) | 36.00 ms |",
		"The commit lag missed its target: the machine had no CPU to spare (its cores were busy 98% of the time), so segments waited for it. During the phase: 1.97 of 2 cores busy",
		"The jobs committed 0.04 segments a second each, each of which writes the segment",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("seed section lacks %q:\n%s", w, got)
		}
	}
	// The process at its GOMAXPROCS on a larger machine: the CPU it may
	// use, not the store.
	p.Busy, p.MachineCPUs, p.CPU = 200, 8, 228
	if got := renderSeed(p, 8); !strings.Contains(got, "the process used about all the CPU Go let it use (GOMAXPROCS 2)") {
		t.Errorf("a process at its GOMAXPROCS is not named the cause:\n%s", got)
	}
	// Cores to spare: the store, with the disk wait that supports it.
	p.Busy, p.MachineCPUs, p.CPU, p.IOWait = 150, 2, 90, 30
	if got := renderSeed(p, 2); !strings.Contains(got, "with cores to spare (busy 62% of the time), segments waited for something else than the CPU: their store's writes and syncs are what a commit waits for besides it (the cores were idle waiting for the disk 12% of the time)") {
		t.Errorf("a lag missed with cores to spare:\n%s", got)
	}
	// Cores to spare on average, but goroutines waiting for one: the
	// scheduler's figures are a row, and the note names them.
	p.SchedP50, p.SchedP90, p.SchedP99 = 8*time.Microsecond, 268*time.Millisecond, 1074*time.Millisecond
	got = renderSeed(p, 2)
	for _, w := range []string{
		"| the process' goroutines waiting, runnable, for a core during the phase (Go's `/sched/latencies:seconds`) p50 / p90 / p99 | <= 8 µs / <= 268 ms / <= 1074 ms | |",
		"with cores to spare on average (busy 62% of the time), the process' goroutines still waited for one: runnable, <= 268 ms at p90 and <= 1074 ms at p99",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("seed section lacks %q:\n%s", w, got)
		}
	}
	p.SchedP50, p.SchedP90, p.SchedP99 = 0, 0, 0
	// A MinIO destination's CPU is its own figure, not the rest's.
	p.StoreCPU, p.Destination = 24, "minio"
	if got := renderSeed(p, 2); !strings.Contains(got, "the 10 etcd processes 0.30, the MinIO server 0.20, the rest (the kernel's writeback among it) 0.00;") {
		t.Errorf("the MinIO server's CPU is not apart:\n%s", got)
	}
	p.Busy, p.EtcdCPU, p.IOWait, p.MachineCPUs, p.StoreCPU, p.CPU, p.Destination = 0, 0, 0, 0, 0, 180, ""
	p.StartedJobs, p.Timeout = 700, 30*time.Minute
	if got := renderSeed(p, 2); !strings.Contains(got, "| jobs that committed their first segment within the start-up bound (30m0s) | 700 of 1000 | all: **missed** |") {
		t.Errorf("a start-up that ran out of time is not judged:\n%s", got)
	}
	p.SteadyPeak, p.LagP99, p.FirstCommits = 900<<20, time.Second, time.Minute
	if got := renderSeed(p, 2); strings.Contains(got, "missed") {
		t.Errorf("every target met, yet:\n%s", got)
	}
}

// TestSeedConfigCheck: flags the mode cannot measure with are refused
// before any etcd starts; without writes no job would ever commit the
// segment the start-up waits for.
func TestSeedConfigCheck(t *testing.T) {
	ok := seedConfig{jobs: 3, etcds: 1, writes: 1, slots: 1, phase: time.Second, dest: "file"}
	if err := ok.check(); err != nil {
		t.Fatalf("valid flags refused: %v", err)
	}
	for name, c := range map[string]seedConfig{
		"no writes": {jobs: 3, etcds: 1, writes: 0, slots: 1, phase: time.Second, dest: "file"},
		"no jobs":   {jobs: 0, etcds: 1, writes: 1, slots: 1, phase: time.Second, dest: "file"},
		"bad dest":  {jobs: 3, etcds: 1, writes: 1, slots: 1, phase: time.Second, dest: "gcs"},
	} {
		if err := c.check(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestSchedQuantiles: the quantiles of the waits between two readings are
// the upper bounds of the buckets they fall in, the last bucket's lower
// bound when unbounded; nothing read or nothing waited gives zeros.
func TestSchedQuantiles(t *testing.T) {
	buckets := []float64{0, 1e-6, 1e-3, 1, math.Inf(1)}
	before := &metrics.Float64Histogram{Counts: []uint64{5, 5, 5, 5}, Buckets: buckets}
	after := &metrics.Float64Histogram{Counts: []uint64{5, 100, 9, 6}, Buckets: buckets}
	p50, p90, p99 := schedQuantiles(before, after)
	if p50 != time.Millisecond || p90 != time.Millisecond || p99 != time.Second {
		t.Errorf("got %v %v %v, want 1ms 1ms 1s", p50, p90, p99)
	}
	after.Counts = []uint64{5, 5, 5, 105}
	if _, _, p99 := schedQuantiles(before, after); p99 != time.Second {
		t.Errorf("unbounded bucket: p99 %v, want its lower bound 1s", p99)
	}
	if a, b, c := schedQuantiles(before, before); a != 0 || b != 0 || c != 0 {
		t.Errorf("nothing waited: %v %v %v", a, b, c)
	}
	if a, b, c := schedQuantiles(nil, after); a != 0 || b != 0 || c != 0 {
		t.Errorf("no reading: %v %v %v", a, b, c)
	}
	// Bounds are rounded up, so that "<=" holds.
	for d, want := range map[time.Duration]string{448: "<= 448 ns", 1280: "<= 2 µs", 268435456: "<= 269 ms", time.Second: "<= 1000 ms"} {
		if got := formatSched(d); got != want {
			t.Errorf("formatSched(%v) = %q, want %q", d, got, want)
		}
	}
}
