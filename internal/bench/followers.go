//go:build !benchlean

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
)

// followersConfig is what the followers subcommand's flags set.
type followersConfig struct {
	followers, etcds int
	writes           int // per second and etcd, of 1 KiB each
	slots            int // full backups in flight; 0: no bound
	phase            time.Duration
	work             string
	heapProfile      string
}

// runFollowers is the "followers" subcommand: many followers in this
// process, spread over a few etcd processes with light writes, as a host
// of a seed's continuous backups runs them. It prints the process' RSS
// after the start, under writes and idle again, and per follower: what
// the followers add to the RSS before them, divided by their number.
func runFollowers(args []string) error {
	var c followersConfig
	fs := flag.NewFlagSet("followers", flag.ContinueOnError)
	fs.IntVar(&c.followers, "n", 100, "followers")
	fs.IntVar(&c.etcds, "etcds", 3, "etcd processes the followers are spread over")
	fs.IntVar(&c.writes, "writes", 10, "puts of 1 KiB per second on each etcd")
	fs.IntVar(&c.slots, "slots", 0, "full backups in flight (backup.RunSlots shared by the followers); 0: no bound")
	fs.DurationVar(&c.phase, "phase", 20*time.Second, "length of the write phase and of the idle phase")
	fs.StringVar(&c.heapProfile, "heap-profile", "", "write a heap profile here at the end of the idle phase")
	fs.StringVar(&c.work, "work", "", "scratch directory (default: a temporary one, removed at the end)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.followers < 1 || c.etcds < 1 || c.writes < 0 || c.phase <= 0 {
		return errors.New("followers: -n and -etcds must be positive, -writes and -phase not negative")
	}
	if c.work == "" {
		dir, err := os.MkdirTemp("", "etcdbackup-followers-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		c.work = dir
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var endpoints []string
	for i := range c.etcds {
		dir := filepath.Join(c.work, fmt.Sprintf("etcd-%d", i))
		e, err := startEtcd(ctx, self, dir, dir+".log", true)
		if err != nil {
			return err
		}
		defer e.stop(30 * time.Second)
		endpoints = append(endpoints, e.endpoint)
	}
	return measureFollowers(ctx, c, endpoints)
}

// followersRun records what the followers report.
type followersRun struct {
	started atomic.Int64
	mu      sync.Mutex
	lags    []time.Duration
	commits int64
	errs    []error
}

func (r *followersRun) ObserveFollow(e backup.FollowEvent) {
	switch e.Kind {
	case backup.ChainStarted, backup.ChainResumed:
		r.started.Add(1)
	case backup.SegmentCommitted:
		r.mu.Lock()
		r.lags = append(r.lags, e.Lag)
		r.commits++
		r.mu.Unlock()
	}
}

// memPoint is the process' memory at one moment.
type memPoint struct {
	rss, heap int64
}

func readMem() memPoint {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memPoint{rss: selfStatus("VmRSS:"), heap: int64(ms.HeapAlloc)}
}

// sampleMem samples the memory every second until ctx ends, and returns
// the largest and the last sample.
func sampleMem(ctx context.Context, d time.Duration) (peak, last memPoint) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	end := time.After(d)
	for {
		last = readMem()
		peak.rss, peak.heap = max(peak.rss, last.rss), max(peak.heap, last.heap)
		select {
		case <-ctx.Done():
			return peak, last
		case <-end:
			return peak, last
		case <-t.C:
		}
	}
}

func measureFollowers(ctx context.Context, c followersConfig, endpoints []string) error {
	writers := make([]*clientv3.Client, len(endpoints))
	for i, ep := range endpoints {
		cli, err := benchClient(ep)
		if err != nil {
			return err
		}
		defer cli.Close()
		writers[i] = cli
		// Something to back up: 100 keys of 1 KiB per etcd.
		for k := range 100 {
			if _, err := cli.Put(ctx, fmt.Sprintf("/seed/%03d", k), strings.Repeat("v", 1024)); err != nil {
				return err
			}
		}
	}
	runtime.GC()
	base := readMem()
	resetHWM()
	rec := &followersRun{}
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	start := time.Now()
	cpu0 := selfCPU()
	var slots *backup.RunSlots
	if c.slots > 0 {
		slots = backup.NewRunSlots(c.slots)
	}
	for i := range c.followers {
		f, closeFn, err := benchFollower(filepath.Join(c.work, fmt.Sprintf("dest-%03d", i)), endpoints[i%len(endpoints)], fmt.Sprintf("cluster-%03d", i), rec)
		if err != nil {
			return err
		}
		f.Pipeline.Slots = slots
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer closeFn()
			if err := f.Run(fctx); err != nil {
				rec.mu.Lock()
				rec.errs = append(rec.errs, err)
				rec.mu.Unlock()
			}
		}()
	}
	for rec.started.Load() < int64(c.followers) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rec.mu.Lock()
		errs := errors.Join(rec.errs...)
		rec.mu.Unlock()
		if errs != nil {
			return errs
		}
		time.Sleep(100 * time.Millisecond)
	}
	startTime := time.Since(start)
	startPeak := selfHWM()
	_, afterStart := sampleMem(ctx, 5*time.Second)

	cpu1 := selfCPU()
	wctx, stopWrites := context.WithCancel(ctx)
	var ww sync.WaitGroup
	for _, cli := range writers {
		ww.Add(1)
		go func() { defer ww.Done(); writeSteadily(wctx, cli, c.writes) }()
	}
	writePeak, writeLast := sampleMem(ctx, c.phase)
	stopWrites()
	ww.Wait()
	cpu2 := selfCPU()
	_, idle := sampleMem(ctx, c.phase)
	cpu3 := selfCPU()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if c.heapProfile != "" {
		if err := writeHeapProfile(c.heapProfile); err != nil {
			return err
		}
	}

	rec.mu.Lock()
	lags, commits := slices.Clone(rec.lags), rec.commits
	rec.mu.Unlock()
	slices.Sort(lags)
	var p99 time.Duration
	if len(lags) > 0 {
		p99 = lags[min(len(lags)-1, len(lags)*99/100)]
	}
	n := int64(c.followers)
	per := func(m memPoint) string { return formatBytes(max(m.rss-base.rss, 0) / n) }
	fmt.Printf("followers %d over %d etcd processes, %d puts/s of 1 KiB per etcd, phases of %s, full backups in flight %s, GOMAXPROCS %d, load %.1f\n",
		c.followers, c.etcds, c.writes, c.phase, slotsLabel(c.slots), runtime.GOMAXPROCS(0), loadAverage())
	fmt.Printf("%-22s %10s %10s %14s\n", "", "RSS", "Go heap", "RSS/follower")
	row := func(name string, m memPoint) {
		fmt.Printf("%-22s %10s %10s %14s\n", name, formatBytes(m.rss), formatBytes(m.heap), per(m))
	}
	row("before the followers", base)
	fmt.Printf("%-22s %10s %10s %14s   (all started in %s)\n", "start-up peak", formatBytes(startPeak), "", formatBytes(max(startPeak-base.rss, 0)/n), startTime.Round(time.Millisecond))
	row("after the start", afterStart)
	row("under writes (peak)", writePeak)
	row("under writes (end)", writeLast)
	row("idle again", idle)
	fmt.Printf("segments committed %d, p99 commit lag %s\n", commits, p99.Round(time.Millisecond))
	fmt.Printf("CPU per follower: start %.1f ms, under writes %.2f%%, idle %.2f%% of a core\n",
		(cpu1-cpu0)*1000/float64(n), 100*(cpu2-cpu1)/c.phase.Seconds()/float64(n), 100*(cpu3-cpu2)/c.phase.Seconds()/float64(n))
	return nil
}

// benchClient is an etcd client of one endpoint.
func benchClient(endpoint string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
}

// benchFollower is one follower of endpoint into a file destination in
// dir, with its own client, as a host gives each cluster.
func benchFollower(dir, endpoint, cluster string, obs backup.FollowObserver) (*backup.Follower, func(), error) {
	bucket, err := fileBucket(context.Background(), dir)
	if err != nil {
		return nil, nil, err
	}
	cli, err := benchClient(endpoint)
	if err != nil {
		_ = bucket.Close()
		return nil, nil, err
	}
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: []string{endpoint}})
	if err != nil {
		return nil, nil, err
	}
	f := &backup.Follower{
		Client:   cli,
		Pipeline: &backup.Pipeline{Snapshotter: snapshotter, Compression: backup.Zstd},
		Cluster:  cluster,
		Targets:  []backup.Target{{Destination: "file", Uploader: &backup.BucketUploader{Bucket: bucket}}},
		Catalogs: []backup.Catalog{bucket},
		Observer: obs,
	}
	return f, func() { _ = cli.Close(); _ = bucket.Close() }, nil
}

// fileBucket opens dir as a file:// destination is opened (storage/blob's
// Open through the drivers' mux, as destination.Registry and the CLI open
// it): exclusive puts, each object synced with its directories before the
// put returns. A fileblob bucket given to blob.New does neither, so a bench
// of it would measure what no host runs.
func fileBucket(ctx context.Context, dir string) (*blob.Bucket, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, err
	}
	return blob.Open(ctx, drivers.NewURLMux(nil), (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String(), nil)
}

// writeSteadily puts perSecond values of 1 KiB a second until ctx ends.
func writeSteadily(ctx context.Context, cli *clientv3.Client, perSecond int) {
	if perSecond <= 0 {
		return
	}
	t := time.NewTicker(time.Second / time.Duration(perSecond))
	defer t.Stop()
	value := strings.Repeat("w", 1024)
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, _ = cli.Put(ctx, fmt.Sprintf("/writes/%04d", i%1000), value)
	}
}

// selfCPU returns the CPU seconds this process used so far.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// writeHeapProfile writes the heap profile of the objects live now to
// path.
func writeHeapProfile(path string) error {
	runtime.GC()
	f, err := os.Create(filepath.Clean(path))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		return err
	}
	return f.Close()
}

func slotsLabel(n int) string {
	if n <= 0 {
		return "unbounded"
	}
	return strconv.Itoa(n)
}
