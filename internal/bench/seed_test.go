//go:build !benchlean

package main

import (
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
	// With the machine's CPU measured, the note says where it went.
	p.Busy, p.EtcdCPU, p.IOWait = 236, 36, 2.4
	got = renderSeed(p, 2)
	for _, w := range []string{
		"| the machine's CPU during the phase | 1.97 of 2 cores busy: the process 1.50, the 10 etcd processes 0.30, the rest 0.17; 0.02 cores idle waiting for the disk |",
		"| the process' CPU per committed segment | 36.00 ms |",
		"The commit lag missed its target: the machine had no CPU to spare. The 2 cores were busy 98% of the time in all during the phase (the process 1.50 cores, the 10 etcd processes serving 1000 watches 0.30, the rest, the kernel's writeback among it, 0.17) and idle waiting for the disk 1% of it",
		"the jobs committed 0.04 segments a second each, every one of which cost the process 36.00 ms of CPU",
		"about one commit a second per job: 36.00 cores of the process alone",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("seed section lacks %q:\n%s", w, got)
		}
	}
	p.Busy = 150
	if got := renderSeed(p, 2); !strings.Contains(got, "The commit lag missed its target: segments waited for their store, not for the CPU alone.") {
		t.Errorf("a lag missed with cores to spare is put on the CPU:\n%s", got)
	}
	p.Busy, p.EtcdCPU, p.IOWait = 0, 0, 0
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
