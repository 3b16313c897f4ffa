//go:build !benchlean

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/schedule"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// The seed-scale targets (issue: one process backing up a seed's
// clusters continuously).
const (
	seedSteadyTarget  = 1 << 30         // steady RSS of the process
	seedStartupTarget = 3 << 29         // start-up peak (VmHWM), 1.5 GiB
	seedLagTarget     = 2 * time.Second // p99 commit lag under writes
)

// seedConfig is what the seed subcommand's flags set.
type seedConfig struct {
	jobs, etcds int
	writes      int // per second and etcd, of 1 KiB each
	slots       int // the scheduler's MaxConcurrent and MaxPerDestination
	phase       time.Duration
	timeout     time.Duration
	work, out   string
	chart       string
	heap, cpu   string
	// execTrace is where to write a runtime/trace of the first
	// ten seconds of the phase ("" for none).
	execTrace string
	dest      string // "file" or "minio"
}

// seedReport is what the "seed" subcommand measured, saved with the
// results.
type seedReport struct {
	Started time.Time
	Command string
	// Commit is the commit measured ("" when the checkout was not clean).
	Commit string `json:",omitempty"`
	// Jobs continuous jobs of one scheduler, over Etcds etcd processes,
	// each written Writes times a second with 1 KiB values; Slots is the
	// scheduler's MaxConcurrent (and MaxPerDestination: one destination).
	Jobs, Etcds, Writes, Slots int
	GOMAXPROCS                 int
	// Destination is the jobs' one destination: "file" or "minio".
	Destination string
	Load        float64 // one-minute load average at the start
	// Base is the RSS before the scheduler started; StartupPeak the
	// VmHWM from then until every job committed its first segment, which
	// took FirstCommits (AllFollowing: until every job followed etcd).
	// When the start-up ran out of -timeout first, they are zero and
	// StartedJobs is how many jobs had committed a segment by then.
	Base, StartupPeak          int64
	AllFollowing, FirstCommits time.Duration
	StartedJobs                int
	Timeout                    time.Duration
	// SteadyPeak and SteadyEnd are the RSS sampled every second over
	// Phase under writes after that, SteadyHeap the Go heap at the end,
	// Goroutines their number at the end.
	SteadyPeak, SteadyEnd, SteadyHeap int64
	Goroutines                        int
	Phase                             time.Duration
	// Commit lags of the segments committed during the phase
	// (FollowEvent.Lag, as the follower lag metric reads them).
	Segments               int64
	LagP50, LagP99, LagMax time.Duration
	// CPU is the process' CPU seconds during the phase; StartCPU during
	// the start-up.
	CPU, StartCPU float64
	// EtcdCPU is the etcd processes' CPU seconds during the phase, Busy
	// the whole machine's (every core's time outside idle and iowait):
	// what the process competed with for the cores.
	EtcdCPU, Busy float64 `json:",omitempty"`
	// IOWait is the time the machine's cores spent idle with a disk
	// request pending during the phase, summed over the cores.
	IOWait float64 `json:",omitempty"`
	// StoreCPU is the MinIO server's CPU seconds during the phase (zero
	// for a file destination); MachineCPUs the cores /proc/stat counts.
	StoreCPU    float64 `json:",omitempty"`
	MachineCPUs int     `json:",omitempty"`
	// Fulls are the full backups taken, MaxFulls the most in flight at
	// once (backup.Observer's Started to Completed or Failed).
	Fulls, MaxFulls int
	// SchedP50, SchedP90 and SchedP99 are how long the process'
	// goroutines waited, runnable, for a core during the phase (the
	// runtime's /sched/latencies:seconds, to its buckets' upper bounds).
	SchedP50, SchedP90, SchedP99 time.Duration `json:",omitempty"`
}

// runSeed is the "seed" subcommand: one process, one schedule.Scheduler
// with -jobs continuous jobs over -etcds etcd processes written -writes
// times a second each, into one file destination (or MinIO server), as a host of a seed's
// continuous backups runs them.
//
//	bench-out/etcdbackup-bench seed [-jobs 1000] [-etcds 10] [-writes 10] [-phase 2m]
func runSeed(args []string) error {
	var c seedConfig
	fs := flag.NewFlagSet("seed", flag.ContinueOnError)
	fs.IntVar(&c.jobs, "jobs", 1000, "continuous jobs of the scheduler")
	fs.IntVar(&c.etcds, "etcds", 10, "etcd processes the jobs are spread over")
	fs.IntVar(&c.writes, "writes", 10, "puts of 1 KiB per second on each etcd")
	fs.IntVar(&c.slots, "slots", schedule.DefaultMaxConcurrent, "the scheduler's MaxConcurrent and MaxPerDestination")
	fs.DurationVar(&c.phase, "phase", 2*time.Minute, "length of the steady phase, after every job committed its first segment")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Minute, "bound on the start-up")
	fs.StringVar(&c.heap, "heap-profile", "", "write a heap profile here at the end of the steady phase, and a goroutine profile beside it (.goroutine)")
	fs.StringVar(&c.dest, "dest", "file", "the one destination of every job: file (a directory) or minio (a MinIO server of its own)")
	fs.StringVar(&c.cpu, "cpu-profile", "", "write a CPU profile of the steady phase here")
	fs.StringVar(&c.execTrace, "exec-trace", "", "write an execution trace (go tool trace) of the first ten seconds of the steady phase here")
	fs.StringVar(&c.work, "work", "bench-out", "directory for scratch files, logs and results")
	fs.StringVar(&c.out, "out", "BENCHMARKS.md", "report to render again with these figures")
	fs.StringVar(&c.chart, "chart", "BENCHMARKS.png", "chart to render again")
	resume := fs.Bool("resume", false, "do nothing when the saved results hold this step of the same run, commit and flags")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	command := "make bench"
	if a := withoutFlag(args, "resume"); len(a) > 0 {
		command = "make bench SEED_FLAGS='" + strings.Join(a, " ") + "'"
	}
	if *resume && stepDone(filepath.Join(c.work, "results.json"), command, func(r *results) (time.Time, string, string) { return r.Seed.step() }) {
		progress("seed: done in the saved results of this commit")
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	self, run, logs, err := scratchDirs(c.work, "seed-run")
	if err != nil {
		return err
	}
	defer os.RemoveAll(run)
	rep := seedReport{Started: time.Now().UTC(), Command: command, Commit: cleanCommit(), Destination: c.dest, Jobs: c.jobs, Etcds: c.etcds, Writes: c.writes, Slots: c.slots,
		GOMAXPROCS: runtime.GOMAXPROCS(0), Load: loadAverage(), Phase: c.phase, Timeout: c.timeout}
	var endpoints []string
	var etcds []*etcdServer
	for i := range c.etcds {
		e, err := startEtcd(ctx, self, filepath.Join(run, fmt.Sprintf("etcd-%d", i)), filepath.Join(logs, fmt.Sprintf("seed-etcd-%d.log", i)), true)
		if err != nil {
			return err
		}
		defer e.stop(time.Minute)
		endpoints = append(endpoints, e.endpoint)
		etcds = append(etcds, e)
	}
	bucket, storeCPU, err := seedBucket(ctx, c.dest, run, logs)
	if err != nil {
		return err
	}
	defer bucket.Close()
	etcdCPU := func() float64 {
		var sum float64
		for _, e := range etcds {
			sum += e.cpuSeconds()
		}
		return sum
	}
	if err := measureSeed(ctx, c, endpoints, servers{etcd: etcdCPU, store: storeCPU}, bucket, &rep); err != nil {
		return err
	}
	return saveSection(filepath.Join(c.work, "results.json"), c.out, c.chart, func(r *results) { r.Seed = &rep })
}

// check reports flags the mode cannot measure with. Without writes no job
// commits a segment (a follower commits only revisions it received), so
// the start-up would wait out -timeout and be judged missed.
func (c seedConfig) check() error {
	if c.jobs < 1 || c.etcds < 1 || c.writes < 1 || c.slots < 1 || c.phase <= 0 {
		return errors.New("seed: -jobs, -etcds, -writes, -slots and -phase must be positive")
	}
	if c.dest != "file" && c.dest != "minio" {
		return fmt.Errorf("seed: -dest %q: file or minio", c.dest)
	}
	return nil
}

// seedRecorder records the followers' events.
type seedRecorder struct {
	mu        sync.Mutex
	fulls     int // in flight
	maxFulls  int
	allFulls  int
	following map[string]bool
	first     map[string]bool // clusters with a committed segment
	steady    bool            // record lags from now on
	lags      []time.Duration
}

func (r *seedRecorder) ObserveFollow(e backup.FollowEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e.Kind {
	case backup.ChainStarted, backup.ChainResumed:
		r.following[e.Cluster] = true
	case backup.SegmentCommitted:
		r.first[e.Cluster] = true
		if r.steady {
			r.lags = append(r.lags, e.Lag)
		}
	}
}

// Observe counts the full backups in flight.
func (r *seedRecorder) Observe(e backup.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e.Kind {
	case backup.Started:
		r.fulls++
		r.allFulls++
		r.maxFulls = max(r.maxFulls, r.fulls)
	case backup.Completed, backup.Failed:
		r.fulls--
	}
}

func (r *seedRecorder) counts() (following, committed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.following), len(r.first)
}

// destBucket is what the jobs' destination is to the runner.
type destBucket interface {
	storage.Bucket
	retention.Store
	Close() error
}

// seedBucket returns the jobs' one destination: a directory under run, or
// a MinIO server of its own (stopped when the bucket is closed), with a
// function that returns the CPU seconds the server has used (always zero
// for a directory).
func seedBucket(ctx context.Context, dest, run, logs string) (destBucket, func() float64, error) {
	none := func() float64 { return 0 }
	if dest == "minio" {
		m, err := startMinIO(ctx, minioBinary(), filepath.Join(run, "minio"), filepath.Join(logs, "seed-minio.log"))
		if err != nil {
			return nil, nil, err
		}
		b, err := modeEnv{S3: m.addr, Access: m.access, Secret: m.secret, Bucket: benchBucket}.bucket()
		if err != nil {
			_ = m.stop(time.Minute)
			return nil, nil, err
		}
		return stopWith{b, func() error { return m.stop(time.Minute) }}, m.cpuSeconds, nil
	}
	b, err := fileBucket(ctx, filepath.Join(run, "dest"))
	return b, none, err
}

// stopWith is a bucket whose Close also stops its server.
type stopWith struct {
	*s3.Bucket
	stop func() error
}

func (b stopWith) Close() error { return b.stop() }

// seedScheduler returns a scheduler of c.jobs continuous jobs, cluster i
// on endpoints[i%len], all into bucket.
func seedScheduler(c seedConfig, endpoints []string, bucket destBucket, rec *seedRecorder) (*schedule.Scheduler, error) {
	snapshotters := map[string]*backup.EtcdSnapshotter{}
	for i := range c.jobs {
		s, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: []string{endpoints[i%len(endpoints)]}})
		if err != nil {
			return nil, err
		}
		snapshotters[seedCluster(i)] = s
	}
	runner := &schedule.PipelineRunner{
		Snapshotter: func(_ context.Context, cluster string) (backup.Snapshotter, error) {
			if s, ok := snapshotters[cluster]; ok {
				return s, nil
			}
			return nil, fmt.Errorf("no cluster %s", cluster)
		},
		Uploader: func(context.Context, string) (backup.Uploader, error) {
			return &backup.BucketUploader{Bucket: bucket}, nil
		},
		Store:          func(context.Context, string) (retention.Store, error) { return bucket, nil },
		FollowObserver: rec,
		Observer:       rec,
	}
	s, err := schedule.New(schedule.Config{Runner: runner, MaxConcurrent: c.slots, MaxPerDestination: c.slots})
	if err != nil {
		return nil, err
	}
	for i := range c.jobs {
		job := schedule.Job{ID: "seed/" + seedCluster(i), Schedule: "@daily", Cluster: seedCluster(i), Name: "continuous",
			Destinations: []string{c.dest}, Continuous: &schedule.Continuous{Window: 24 * time.Hour}}
		if err := s.Set(job); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func seedCluster(i int) string { return fmt.Sprintf("cluster-%04d", i) }

// servers return the CPU seconds the seed's servers have used: the etcd
// processes, and the destination's server.
type servers struct{ etcd, store func() float64 }

// measureSeed runs the scheduler: writes from the start, the start-up
// until every job committed a segment, then the steady phase.
func measureSeed(ctx context.Context, c seedConfig, endpoints []string, srv servers, bucket destBucket, rep *seedReport) error {
	wctx, stopWrites := context.WithCancel(ctx)
	var ww sync.WaitGroup
	defer func() { stopWrites(); ww.Wait() }()
	for _, ep := range endpoints {
		cli, err := benchClient(ep)
		if err != nil {
			return err
		}
		defer cli.Close()
		for k := range 100 { // something to back up: 100 keys of 1 KiB
			if _, err := cli.Put(ctx, fmt.Sprintf("/seed/%03d", k), strings.Repeat("v", 1024)); err != nil {
				return err
			}
		}
		ww.Add(1)
		go func(cli *clientv3.Client) { defer ww.Done(); writeSteadily(wctx, cli, c.writes) }(cli)
	}
	rec := &seedRecorder{following: map[string]bool{}, first: map[string]bool{}}
	s, err := seedScheduler(c, endpoints, bucket, rec)
	if err != nil {
		return err
	}
	runtime.GC()
	rep.Base = readMem().rss
	resetHWM() // VmHWM from here
	sctx, stopScheduler := context.WithCancel(ctx)
	done := make(chan error, 1)
	defer func() { stopScheduler(); <-done }()
	cpu0, start := selfCPU(), time.Now()
	progress("seed: %d continuous jobs over %d etcds, load %.1f", c.jobs, c.etcds, rep.Load)
	go func() { done <- s.Start(sctx) }()
	if err := seedStartup(ctx, c, rec, start, rep, done); err != nil {
		return err
	}
	rep.StartupPeak, rep.StartCPU = selfHWM(), selfCPU()-cpu0
	rec.mu.Lock()
	rep.Fulls, rep.MaxFulls = rec.allFulls, rec.maxFulls
	rec.mu.Unlock()
	progress("seed: start-up over after %s; steady phase of %s", time.Since(start).Round(time.Second), c.phase)

	rec.mu.Lock()
	rec.steady = true
	rec.mu.Unlock()
	stopProfile, err := startCPUProfile(c.cpu)
	if err != nil {
		return err
	}
	stopTrace, err := startExecTrace(c.execTrace, min(10*time.Second, c.phase))
	if err != nil {
		return err
	}
	defer stopTrace()
	cpu1, etcd1, store1, busy1, wait1 := selfCPU(), srv.etcd(), srv.store(), busySeconds(), iowaitSeconds()
	sched := schedLatencies()
	peak, last := sampleMem(ctx, c.phase)
	rep.SchedP50, rep.SchedP90, rep.SchedP99 = schedQuantiles(sched, schedLatencies())
	rep.CPU, rep.EtcdCPU, rep.StoreCPU = selfCPU()-cpu1, srv.etcd()-etcd1, srv.store()-store1
	rep.Busy, rep.IOWait, rep.MachineCPUs = busySeconds()-busy1, iowaitSeconds()-wait1, machineCPUs()
	if err := stopProfile(); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	rep.SteadyPeak, rep.SteadyEnd, rep.SteadyHeap, rep.Goroutines = peak.rss, last.rss, last.heap, runtime.NumGoroutine()
	if c.heap != "" {
		if err := writeHeapProfile(c.heap); err != nil {
			return err
		}
		if err := writeGoroutineProfile(c.heap + ".goroutine"); err != nil {
			return err
		}
	}
	rec.mu.Lock()
	lags := slices.Clone(rec.lags)
	rec.mu.Unlock()
	slices.Sort(lags)
	rep.Segments = int64(len(lags))
	rep.LagP50, rep.LagP99, rep.LagMax = quantile(lags, 0.5), quantile(lags, 0.99), quantile(lags, 1)
	progress("seed: steady RSS %s (peak %s), start-up peak %s, p99 commit lag %s, %d goroutines",
		formatBytes(rep.SteadyEnd), formatBytes(rep.SteadyPeak), formatBytes(rep.StartupPeak), rep.LagP99.Round(time.Millisecond), rep.Goroutines)
	return nil
}

// seedStartup waits until every job committed a segment, and records how
// long that and following took.
func seedStartup(ctx context.Context, c seedConfig, rec *seedRecorder, start time.Time, rep *seedReport, done <-chan error) error {
	deadline := time.Now().Add(c.timeout)
	for next := time.Now(); ; {
		following, committed := rec.counts()
		if following == c.jobs && rep.AllFollowing == 0 {
			rep.AllFollowing = time.Since(start)
		}
		rep.StartedJobs = committed
		if committed == c.jobs {
			rep.FirstCommits = time.Since(start)
			return nil
		}
		if time.Now().After(next) {
			progress("seed: %d of %d following, %d committed a segment, RSS %s", following, c.jobs, committed, formatBytes(readMem().rss))
			next = time.Now().Add(10 * time.Second)
		}
		if time.Now().After(deadline) {
			// Measured on as it is: the report says the start-up missed.
			progress("seed: only %d of %d jobs committed a segment within %s", committed, c.jobs, c.timeout)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-done:
			return fmt.Errorf("seed: the scheduler ended: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// renderSeed writes the figures of the "seed" subcommand.
func renderSeed(p *seedReport, cpus int) string {
	var b strings.Builder
	b.WriteString("### Seed scale: many continuous jobs in one process\n\n")
	if p == nil {
		b.WriteString("Not measured by this run: `make bench` runs `etcdbackup-bench seed` after pitr-restore.\n\n")
		return b.String()
	}
	fmt.Fprintf(&b, "Measured by `%s` (`etcdbackup-bench seed`) on %s, one run, load average %.1f at its start, GOMAXPROCS %d. One process runs a `schedule.Scheduler` with `schedule.PipelineRunner` and %d continuous jobs (daily schedule, zstd, the default flush), spread over %d etcd processes (their own processes, whose CPU is counted apart), each holding 100 keys of 1 KiB and written %d times a second with 1 KiB values from the start; all jobs store into one %s, so the scheduler's run slots (MaxConcurrent and MaxPerDestination %d) bound the first full backups in flight. Each follower has its own etcd client, from its cluster's `backup.EtcdSnapshotter`, as a host with a snapshotter per cluster gives it. RSS is the whole process', the bench's %d writers' clients included; the start-up peak is its VmHWM from the scheduler's start until every job committed its first segment; the steady figures are sampled every second for %s after that, under the writes. The commit lag is `FollowEvent.Lag` of every segment committed during the steady phase (%d segments), what the follower lag metric shows.\n\n",
		p.Command, p.Started.Format("2006-01-02 15:04 MST"), p.Load, p.GOMAXPROCS, p.Jobs, p.Etcds, p.Writes, seedDestLabel(p.Destination), p.Slots, p.Etcds, p.Phase, p.Segments)
	b.WriteString("| figure | measured | target |\n|---|---|---|\n")
	n := int64(max(p.Jobs, 1))
	fmt.Fprintf(&b, "| RSS before the scheduler started | %s | |\n", formatBytes(p.Base))
	if p.FirstCommits > 0 {
		fmt.Fprintf(&b, "| every job following etcd / committed its first segment | after %s / %s | |\n",
			p.AllFollowing.Round(100*time.Millisecond), p.FirstCommits.Round(100*time.Millisecond))
	} else {
		fmt.Fprintf(&b, "| jobs that committed their first segment within the start-up bound (%s) | %d of %d | all: %s |\n", p.Timeout, p.StartedJobs, p.Jobs, verdict(false))
	}
	fmt.Fprintf(&b, "| full backups taken during the start-up; most in flight at once | %d; %d | <= the run slots (%d): %s |\n", p.Fulls, p.MaxFulls, p.Slots, verdict(p.MaxFulls <= p.Slots))
	fmt.Fprintf(&b, "| start-up peak RSS (VmHWM) | %s (%s per job above the base) | <= %s: %s |\n",
		formatBytes(p.StartupPeak), formatBytes(max(p.StartupPeak-p.Base, 0)/n), formatBytes(seedStartupTarget), verdict(p.StartupPeak <= seedStartupTarget))
	fmt.Fprintf(&b, "| steady RSS, peak of the phase (end) | %s (%s), %s per job above the base | <= %s: %s |\n",
		formatBytes(p.SteadyPeak), formatBytes(p.SteadyEnd), formatBytes(max(p.SteadyPeak-p.Base, 0)/n), formatBytes(seedSteadyTarget), verdict(p.SteadyPeak <= seedSteadyTarget))
	fmt.Fprintf(&b, "| Go heap at the end; goroutines | %s; %d (%.1f per job) | |\n", formatBytes(p.SteadyHeap), p.Goroutines, float64(p.Goroutines)/float64(n))
	fmt.Fprintf(&b, "| commit lag p50 / max | %s / %s | |\n", p.LagP50.Round(time.Millisecond), p.LagMax.Round(time.Millisecond))
	fmt.Fprintf(&b, "| commit lag p99 | %s | <= %v: %s |\n", p.LagP99.Round(time.Millisecond), seedLagTarget, verdict(p.Segments > 0 && p.LagP99 <= seedLagTarget))
	if p.Phase > 0 {
		fmt.Fprintf(&b, "| CPU per follower under writes | %.3f%% of a core (the process: %.2f cores) | |\n",
			100*p.CPU/p.Phase.Seconds()/float64(n), p.CPU/p.Phase.Seconds())
	}
	if p.Phase > 0 && p.Busy > 0 {
		fmt.Fprintf(&b, "| the machine's CPU during the phase | %s | |\n", p.machineCPU())
	}
	if p.Segments > 0 {
		fmt.Fprintf(&b, "| the process' CPU during the phase per committed segment (watching, encoding and the writers' clients included) | %.2f ms | |\n", 1000*p.CPU/float64(p.Segments))
	}
	fmt.Fprintf(&b, "| CPU of the start-up, per job | %.0f ms | |\n", 1000*p.StartCPU/float64(n))
	if p.SchedP99 > 0 {
		fmt.Fprintf(&b, "| the process' goroutines waiting, runnable, for a core during the phase (Go's `/sched/latencies:seconds`) p50 / p90 / p99 | %s / %s / %s | |\n",
			formatSched(p.SchedP50), formatSched(p.SchedP90), formatSched(p.SchedP99))
	}
	b.WriteString("\n")
	if p.Segments > 0 && p.LagP99 > seedLagTarget && p.Phase > 0 {
		b.WriteString(p.lagMissed(cpus))
	}
	if p.SteadyPeak > seedSteadyTarget || p.StartupPeak > seedStartupTarget {
		b.WriteString("The RSS missed its target: per job the process holds the follower's etcd client (a gRPC connection and a watch stream, about ten goroutines of them) and the follower's own goroutines and buffers, and the collector's headroom over the heap (see the Go heap row); `GOMEMLIMIT` bounds the latter.\n\n")
	}
	return b.String()
}

// machineCPU describes where the machine's CPU went during the phase.
func (p *seedReport) machineCPU() string {
	sec := p.Phase.Seconds()
	store := ""
	if p.StoreCPU > 0 {
		store = fmt.Sprintf(", the MinIO server %.2f", p.StoreCPU/sec)
	}
	rest := max(p.Busy-p.CPU-p.EtcdCPU-p.StoreCPU, 0)
	return fmt.Sprintf("%.2f of %d cores busy: the process %.2f, the %d etcd processes %.2f%s, the rest (the kernel's writeback among it) %.2f; %.2f cores idle waiting for the disk",
		p.Busy/sec, p.MachineCPUs, p.CPU/sec, p.Etcds, p.EtcdCPU/sec, store, rest/sec, p.IOWait/sec)
}

// lagMissed says why the commit lag missed its target, as far as the
// figures of the phase tell.
func (p *seedReport) lagMissed(cpus int) string {
	sec, n := p.Phase.Seconds(), float64(max(p.Jobs, 1))
	rate := float64(p.Segments) / sec / n
	if p.Busy <= 0 || p.MachineCPUs <= 0 {
		return fmt.Sprintf("The commit lag missed its target: the process used %.2f of the machine's %d cores during the phase, beside %d etcd processes and whatever else ran (load average %.1f at the start), and a segment's commit waits for its store: %.2f commits a second per job during the phase%s.\n\n",
			p.CPU/sec, cpus, p.Etcds, p.Load, rate, seedStoreCost(p.Destination))
	}
	var cause string
	switch busy := p.Busy / sec / float64(p.MachineCPUs); {
	case p.GOMAXPROCS > 0 && p.CPU/sec >= 0.9*float64(p.GOMAXPROCS):
		cause = fmt.Sprintf("the process used about all the CPU Go let it use (GOMAXPROCS %d), so segments waited for it", p.GOMAXPROCS)
	case busy >= 0.9:
		cause = fmt.Sprintf("the machine had no CPU to spare (its cores were busy %.0f%% of the time), so segments waited for it", 100*busy)
	case p.SchedP99 >= seedSchedSlow:
		cause = fmt.Sprintf("with cores to spare on average (busy %.0f%% of the time), the process' goroutines still waited for one: runnable, %s at p90 and %s at p99 before they ran (Go's scheduler latencies), and a segment's commit is a chain of such waits, beside its store's writes and syncs (the cores were idle waiting for the disk %.0f%% of the time)",
			100*busy, formatSched(p.SchedP90), formatSched(p.SchedP99), 100*p.IOWait/sec/float64(p.MachineCPUs))
	default:
		cause = fmt.Sprintf("with cores to spare (busy %.0f%% of the time), segments waited for something else than the CPU: their store's writes and syncs are what a commit waits for besides it (the cores were idle waiting for the disk %.0f%% of the time)",
			100*busy, 100*p.IOWait/sec/float64(p.MachineCPUs))
	}
	return fmt.Sprintf("The commit lag missed its target: %s. During the phase: %s. The jobs committed %.2f segments a second each%s.\n\n",
		cause, p.machineCPU(), rate, seedStoreCost(p.Destination))
}

// seedSchedSlow is a p99 wait for a core that the lag note names as a
// cause.
const seedSchedSlow = 100 * time.Millisecond

// schedLatencies reads the runtime's histogram of the time goroutines
// waited, runnable, before they ran.
func schedLatencies() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// schedQuantiles returns the p50, p90 and p99 of the waits between two
// readings of schedLatencies, each the upper bound of its bucket; zero
// when the runtime has no such histogram or nothing waited. A quantile in
// the last, unbounded bucket is that bucket's lower bound, which is past
// any wait the report cares about (the runtime's last bound is hours).
func schedQuantiles(before, after *metrics.Float64Histogram) (p50, p90, p99 time.Duration) {
	if before == nil || after == nil || len(before.Counts) != len(after.Counts) {
		return 0, 0, 0
	}
	counts := make([]uint64, len(after.Counts))
	var total uint64
	for i := range counts {
		counts[i] = after.Counts[i] - before.Counts[i]
		total += counts[i]
	}
	if total == 0 {
		return 0, 0, 0
	}
	at := func(q float64) time.Duration {
		var cum uint64
		for i, c := range counts {
			cum += c
			if float64(cum) >= q*float64(total) {
				bound := after.Buckets[i+1]
				if math.IsInf(bound, 1) {
					bound = after.Buckets[i]
				}
				return time.Duration(bound * float64(time.Second))
			}
		}
		return 0
	}
	return at(0.5), at(0.9), at(0.99)
}

// formatSched prints a quantile schedQuantiles returned: the upper bound
// of the runtime's bucket it fell in, rounded up, so "<=" holds (the
// runtime's buckets are finer than the units printed).
func formatSched(d time.Duration) string {
	switch {
	case d >= time.Millisecond:
		return fmt.Sprintf("<= %.0f ms", math.Ceil(float64(d)/float64(time.Millisecond)))
	case d >= time.Microsecond:
		return fmt.Sprintf("<= %.0f µs", math.Ceil(float64(d)/float64(time.Microsecond)))
	}
	return fmt.Sprintf("<= %d ns", d.Nanoseconds())
}

// writeGoroutineProfile writes the stacks of every goroutine to path.
func writeGoroutineProfile(path string) error {
	f, err := os.Create(filepath.Clean(path))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.Lookup("goroutine").WriteTo(f, 0); err != nil {
		return err
	}
	return f.Close()
}

// startCPUProfile starts a CPU profile into path, none for "", and
// returns the function that ends it.
func startCPUProfile(path string) (func() error, error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(filepath.Clean(path))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() error { pprof.StopCPUProfile(); return f.Close() }, nil
}

// startExecTrace writes an execution trace of the next d into path, none
// for "", and returns the function that ends it early (or waits for its
// end); the trace's errors are reported by progress.
func startExecTrace(path string, d time.Duration) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(filepath.Clean(path))
	if err != nil {
		return nil, err
	}
	if err := trace.Start(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	var once sync.Once
	end := func() {
		once.Do(func() {
			trace.Stop()
			if err := f.Close(); err != nil {
				progress("seed: execution trace: %v", err)
			}
		})
	}
	time.AfterFunc(d, end)
	return end, nil
}

// seedDestLabel names the jobs' destination of a seed run.
func seedDestLabel(dest string) string {
	if dest == "minio" {
		return "MinIO server (a process of its own, on the same cores, whose CPU is counted apart)"
	}
	return "file destination (a directory on the bench's disk)"
}

// seedStoreCost says what storing a segment costs on dest.
func seedStoreCost(dest string) string {
	if dest == "minio" {
		return ": MinIO, on the same cores, answers every commit's requests"
	}
	return ", each of which writes the segment and its manifest with their attributes files on the file destination, waits for a sync of the file system shared with the other puts waiting then (on Linux 5.8 and later, on a local file system: `storage/blob`'s shared syncs; elsewhere an fsync of each file), and links them to their names, each after such a sync; how the process' CPU splits between storing, watching and encoding is not measured by this run (`-cpu-profile` writes a profile of the phase, `-exec-trace` an execution trace of its first ten seconds)"
}
