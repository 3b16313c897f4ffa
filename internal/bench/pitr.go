//go:build !benchlean

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/restore"
)

// The "pitr" subcommand measures continuous backup: a follower (a process
// of its own, so that its peak RSS is its own) follows an etcd that takes
// -rate writes per second of -value bytes for -duration; the commit lag of
// every revision is the time from etcd's answer to the write to the commit
// of the manifest of the segment holding it. Then the last revision is
// restored offline and the replay speed reported, next to restoring the
// full backup alone.
//
//	bench-out/etcdbackup-bench pitr [-duration 60s] [-rate 1000] [-value 1024]

// pitrLine is one line the follower child writes on stdout.
type pitrLine struct {
	Kind        string `json:"kind"` // "chain", "segment", "end"
	First, Last int64  `json:",omitempty"`
	Committed   int64  `json:",omitempty"` // Unix nanoseconds
	HWM         int64  `json:",omitempty"`
}

func runPITR(args []string) error {
	fs := flag.NewFlagSet("pitr", flag.ContinueOnError)
	duration := fs.Duration("duration", 60*time.Second, "how long the writes run")
	rate := fs.Int("rate", 1000, "writes per second")
	valueSize := fs.Int("value", 1024, "value size in bytes")
	work := fs.String("work", "bench-out", "directory for scratch files and logs")
	out := fs.String("out", "bench-out/pitr.md", "markdown table to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	self, run, logs, err := scratchDirs(*work, "pitr-run")
	if err != nil {
		return err
	}
	defer os.RemoveAll(run)

	minio, err := startMinIO(ctx, minioBinary(), filepath.Join(run, "minio"), filepath.Join(logs, "pitr-minio.log"))
	if err != nil {
		return err
	}
	defer minio.stop(time.Minute)
	etcd, err := startEtcd(ctx, self, filepath.Join(run, "etcd"), filepath.Join(logs, "pitr-etcd.log"), false)
	if err != nil {
		return err
	}
	defer etcd.stop(time.Minute)
	env := modeEnv{Etcd: etcd.endpoint, S3: minio.addr, Access: minio.access, Secret: minio.secret, Bucket: benchBucket, Name: "pitr"}
	// The full backup the chain starts from is taken here, so that the
	// follower's peak RSS is that of following alone (a follower that
	// takes the full backup itself peaks at the pipeline's buffers).
	if err := pitrFull(ctx, env); err != nil {
		return err
	}

	child, lines, err := startPITRFollower(self, env, filepath.Join(logs, "pitr-follower.log"))
	if err != nil {
		return err
	}
	defer func() { _ = child.Process.Kill() }()
	if l, ok := <-lines; !ok || l.Kind != "chain" {
		return errors.New("the follower did not start its chain")
	}
	progress("pitr: follower started; %d writes/s of %d bytes for %v", *rate, *valueSize, *duration)

	cli, err := etcd.client()
	if err != nil {
		return err
	}
	defer cli.Close()
	done, err := writeLoad(ctx, cli, *rate, *valueSize, *duration)
	if err != nil {
		return err
	}
	last := done[len(done)-1].rev
	var segs []pitrLine
	var hwm int64
	waitEnd := time.After(2 * time.Minute)
collect:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				break collect
			}
			switch l.Kind {
			case "segment":
				segs = append(segs, l)
				if l.Last >= last {
					_ = child.Process.Signal(syscall.SIGTERM)
				}
			case "end":
				hwm = l.HWM
			}
		case <-waitEnd:
			return errors.New("the follower did not commit the last revision within 2 minutes")
		}
	}
	if err := child.Wait(); err != nil {
		return fmt.Errorf("follower: %w (log %s)", err, filepath.Join(logs, "pitr-follower.log"))
	}
	lags, err := commitLags(done, segs)
	if err != nil {
		return err
	}
	rep := pitrReport{Writes: len(done), Seconds: duration.Seconds(), Value: *valueSize, Segments: len(segs), HWM: hwm, Lags: lags}
	rep.Rate = float64(len(done)) / done[len(done)-1].at.Sub(done[0].at).Seconds()
	if err := measureReplay(ctx, env, last, filepath.Join(run, "restore"), &rep); err != nil {
		return err
	}
	progress("pitr: compacting the chain to revision %d", last)
	cr, err := measureCompaction(ctx, env, last, filepath.Join(run, "compact"))
	if err != nil {
		return err
	}
	md := strings.TrimSuffix(rep.markdown(*rate, strings.Join(args, " ")), "\n") + cr.markdown(rep.FullOnly, rep.PointTotal, false) + "\n"
	fmt.Print(md)
	return os.WriteFile(*out, []byte(md), 0o644)
}

// scratchDirs makes a fresh scratch directory name under work, and the
// logs directory, and returns their paths with this binary's, which the
// subcommands run again as etcd and as a follower.
func scratchDirs(work, name string) (self, run, logs string, err error) {
	if self, err = os.Executable(); err != nil {
		return "", "", "", err
	}
	run, logs = filepath.Join(work, name), filepath.Join(work, "logs")
	if err := os.RemoveAll(run); err != nil {
		return "", "", "", err
	}
	for _, d := range []string{run, logs} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", "", "", err
		}
	}
	return self, run, logs, nil
}

// pitrFull takes the full backup the follower's chain starts from.
func pitrFull(ctx context.Context, env modeEnv) error {
	bucket, err := env.bucket()
	if err != nil {
		return err
	}
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: []string{env.Etcd}})
	if err != nil {
		return err
	}
	p := &backup.Pipeline{Snapshotter: snapshotter, Compression: backup.Zstd}
	_, err = p.Run(ctx, backup.Request{Cluster: "bench", Name: backup.DefaultFullName, Scheduled: true,
		Targets: []backup.Target{{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: bucket}}}})
	return err
}

// startPITRFollower starts the follower child; its lines come on the
// returned channel, which is closed when its stdout ends.
func startPITRFollower(self string, env modeEnv, logPath string) (*exec.Cmd, <-chan pitrLine, error) {
	cmd := exec.Command(self, "pitr-follow")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	if err := json.NewEncoder(stdin).Encode(env); err != nil {
		return nil, nil, err
	}
	_ = stdin.Close()
	lines := make(chan pitrLine, 1024)
	go func() {
		defer close(lines)
		defer logf.Close()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var l pitrLine
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				lines <- l
			}
		}
	}()
	return cmd, lines, nil
}

// runPITRFollower is the "pitr-follow" subcommand: a follower of env's
// etcd into env's bucket until SIGTERM, reporting segments on stdout.
func runPITRFollower() error {
	var env modeEnv
	if err := json.NewDecoder(os.Stdin).Decode(&env); err != nil {
		return fmt.Errorf("read environment: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{env.Etcd}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: []string{env.Etcd}})
	if err != nil {
		return err
	}
	bucket, err := env.bucket()
	if err != nil {
		return err
	}
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	emit := func(l pitrLine) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(l)
	}
	f := &backup.Follower{
		Client:   cli,
		Pipeline: &backup.Pipeline{Snapshotter: snapshotter, Compression: backup.Zstd, Logger: traceLogger()},
		Cluster:  "bench",
		Targets:  []backup.Target{{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: bucket}}},
		Catalogs: []backup.Catalog{bucket},
		Observer: backup.FollowObserverFunc(func(e backup.FollowEvent) {
			switch e.Kind {
			case backup.ChainStarted, backup.ChainResumed:
				emit(pitrLine{Kind: "chain"})
			case backup.SegmentCommitted:
				emit(pitrLine{Kind: "segment", First: e.Revision, Last: e.Committed, Committed: e.Time.UnixNano()})
			}
		}),
	}
	if err := f.Run(ctx); err != nil {
		return err
	}
	emit(pitrLine{Kind: "end", HWM: selfHWM()})
	return nil
}

// written is a write etcd acknowledged: its revision and when.
type written struct {
	rev int64
	at  time.Time
}

// writeLoad writes rate values a second for d, paced by a schedule, from
// eight clients' worth of goroutines; it returns the writes in revision
// order.
func writeLoad(ctx context.Context, cli *clientv3.Client, rate, size int, d time.Duration) ([]written, error) {
	const workers = 16
	total := int(d.Seconds() * float64(rate))
	value := strings.Repeat("v", size)
	start := time.Now()
	var (
		mu   sync.Mutex
		out  = make([]written, 0, total)
		next int
		errs []error
		wg   sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= total || ctx.Err() != nil {
					return
				}
				time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))))
				resp, err := cli.Put(ctx, fmt.Sprintf("/bench/%05d", i%5000), value)
				at := time.Now()
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					out = append(out, written{rev: resp.Header.Revision, at: at})
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, fmt.Errorf("%d writes failed, the first: %w", len(errs), errs[0])
	}
	slices.SortFunc(out, func(a, b written) int { return int(a.rev - b.rev) })
	return out, nil
}

// commitLags returns, for every write, the time from etcd's answer to the
// commit of the segment holding its revision, sorted.
func commitLags(done []written, segs []pitrLine) ([]time.Duration, error) {
	slices.SortFunc(segs, func(a, b pitrLine) int { return int(a.Last - b.Last) })
	lags := make([]time.Duration, 0, len(done))
	for _, w := range done {
		i := sort.Search(len(segs), func(i int) bool { return segs[i].Last >= w.rev })
		if i == len(segs) || segs[i].First > w.rev {
			return nil, fmt.Errorf("revision %d is in no segment", w.rev)
		}
		lags = append(lags, time.Unix(0, segs[i].Committed).Sub(w.at))
	}
	slices.Sort(lags)
	return lags, nil
}

// pitrReport holds the figures of one run.
type pitrReport struct {
	Writes   int
	Seconds  float64
	Rate     float64
	Value    int
	Segments int
	HWM      int64
	Lags     []time.Duration
	// Replay figures: the events applied, the replay's duration, the
	// whole point restore's and the full backup's restore alone.
	Events                         int64
	Replay, PointTotal, FullOnly   time.Duration
	FullRevision, RestoredRevision int64
}

// measureReplay restores revision last, and the full backup alone.
func measureReplay(ctx context.Context, env modeEnv, last int64, dir string, rep *pitrReport) error {
	bucket, err := env.bucket()
	if err != nil {
		return err
	}
	sources := []restore.Source{{Name: "minio", Catalog: bucket}}
	plan, err := restore.FindPoint(ctx, sources, restore.Point{Cluster: "bench", Revision: last})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	r := &restore.Restorer{}
	member := restore.Member{Name: "m", PeerURLs: []string{"http://127.0.0.1:2380"}}
	member.DataDir = filepath.Join(dir, "full")
	start := time.Now()
	if _, err := r.Restore(ctx, plan.Full, member); err != nil {
		return err
	}
	rep.FullOnly = time.Since(start)
	member.DataDir = filepath.Join(dir, "point")
	start = time.Now()
	res, err := r.RestorePoint(ctx, plan, member)
	if err != nil {
		return err
	}
	rep.PointTotal = time.Since(start)
	rep.Events, rep.Replay = res.Events, res.Replay
	rep.FullRevision, rep.RestoredRevision = res.FullRevision, res.Revision
	return nil
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func (r pitrReport) markdown(rate int, args string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Continuous backup (`etcdbackup-bench pitr %s`)\n\n", args)
	fmt.Fprintf(&b, "%d writes of %d-byte values asked at %d/s for %.0f s, done at %.0f/s; the follower (a process of its own, resuming after a full backup) stored them in %d segments (zstd, default 1 s flush) on MinIO. etcd, MinIO, the follower and the writer share the machine's cores.\n\n",
		r.Writes, r.Value, rate, r.Seconds, r.Rate, r.Segments)
	b.WriteString("| figure | measured | target |\n|---|---|---|\n")
	p99 := quantile(r.Lags, 0.99)
	fmt.Fprintf(&b, "| commit lag p50 | %s | |\n", quantile(r.Lags, 0.5).Round(time.Millisecond))
	fmt.Fprintf(&b, "| commit lag p99 | %s | <= 2 s: %s |\n", p99.Round(time.Millisecond), verdict(p99 <= 2*time.Second))
	fmt.Fprintf(&b, "| commit lag max | %s | |\n", r.Lags[len(r.Lags)-1].Round(time.Millisecond))
	fmt.Fprintf(&b, "| follower peak RSS (VmHWM) | %s | <= 64 MiB: %s |\n", formatBytes(r.HWM), verdict(r.HWM <= 64<<20))
	eps := float64(r.Events) / r.Replay.Seconds()
	fmt.Fprintf(&b, "| offline replay | %d events in %s: %.0f events/s | >= 100,000/s: %s |\n", r.Events, r.Replay.Round(time.Millisecond), eps, verdict(eps >= 100_000))
	fmt.Fprintf(&b, "| restore of revision %d (full at %d + replay) | %s | |\n", r.RestoredRevision, r.FullRevision, r.PointTotal.Round(time.Millisecond))
	fmt.Fprintf(&b, "| restore of the full backup alone | %s | |\n\n", r.FullOnly.Round(time.Millisecond))
	return b.String()
}
