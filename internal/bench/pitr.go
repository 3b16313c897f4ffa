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

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/restore"
)

// The "pitr" subcommand measures continuous backup: a follower (a process
// of its own in the lean binary, so that its peak RSS is its own) starts
// on a copy of the filled etcd of -full, takes the chain's full backup
// itself, as a follower started on a cluster does, then follows the etcd
// while it takes -rate writes per second of -value bytes for -duration;
// the commit lag of every revision is the time from etcd's answer to the
// write to the commit of the manifest of the segment holding it. Then the
// last revision is restored offline and the replay speed reported, next
// to restoring the full backup alone. The figures go into results.json,
// and the report is rendered again.
//
//	bench-out/etcdbackup-bench pitr [-full 1GiB] [-duration 60s] [-rate 1000] [-value 1024]

func runPITR(args []string) error {
	fs := flag.NewFlagSet("pitr", flag.ContinueOnError)
	duration := fs.Duration("duration", 60*time.Second, "how long the writes run")
	rate := fs.Int("rate", 1000, "writes per second")
	valueSize := fs.Int("value", 1024, "value size in bytes")
	fullSize := fs.String("full", "1GiB", "size of the filled etcd (from the fill cache) the follower takes its own full backup of first; 0 for an empty etcd")
	work := fs.String("work", "bench-out", "directory for the fill cache, scratch files, logs and results")
	out := fs.String("out", "BENCHMARKS.md", "report to render again with these figures")
	chart := fs.String("chart", "BENCHMARKS.png", "chart to render again")
	resume := fs.Bool("resume", false, "do nothing when the saved results hold this step of the same run, commit and flags")
	if err := fs.Parse(args); err != nil {
		return err
	}
	command := pitrCommand("pitr", withoutFlag(args, "resume"))
	if *resume && stepDone(filepath.Join(*work, "results.json"), command, func(r *results) (time.Time, string, string) { return r.Continuous.step() }) {
		progress("pitr: done in the saved results of this commit")
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	self, run, logs, err := scratchDirs(*work, "pitr-run")
	if err != nil {
		return err
	}
	defer os.RemoveAll(run)
	rep := pitrReport{Started: time.Now().UTC(), Command: command, Commit: cleanCommit(), Asked: *rate, Value: *valueSize}
	if err := filledCopy(ctx, *work, *fullSize, self, logs, filepath.Join(run, "etcd"), &rep); err != nil {
		return err
	}
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
	// The follower takes the chain's full backup itself, as a follower
	// started on a cluster does, so its peak RSS includes the full.
	lean, err := leanBinary(self, backupModes)
	if err != nil {
		return err
	}
	child, lines, err := startPITRFollower(lean, env, filepath.Join(logs, "pitr-follower.log"))
	if err != nil {
		return err
	}
	defer func() { _ = child.Process.Kill() }()
	l, ok := <-lines
	if !ok || l.Kind != "chain" {
		return errors.New("the follower did not start its chain")
	}
	rep.ChainHWM = l.HWM
	progress("pitr: follower started; %d writes/s of %d bytes for %v", *rate, *valueSize, *duration)
	if err := followLoad(ctx, etcd, child, lines, *rate, *valueSize, *duration, &rep); err != nil {
		return fmt.Errorf("%w (log %s)", err, filepath.Join(logs, "pitr-follower.log"))
	}
	if err := measureReplay(ctx, env, rep.RestoredRevision, filepath.Join(run, "restore"), &rep); err != nil {
		return err
	}
	progress("pitr: compacting the chain to revision %d", rep.RestoredRevision)
	if rep.Compaction, err = measureCompaction(ctx, env, minio.server, rep.RestoredRevision, filepath.Join(run, "compact")); err != nil {
		return err
	}
	progress("pitr: commit lag p99 %v, follower peak RSS %s", rep.LagP99, formatBytes(rep.HWM))
	return saveSection(filepath.Join(*work, "results.json"), *out, *chart, func(r *results) { r.Continuous = &rep })
}

// pitrCommand is the make command line of a continuous-backup subcommand.
func pitrCommand(sub string, args []string) string {
	v := map[string]string{"pitr": "PITR_FLAGS", "pitr-restore": "PITR_RESTORE_FLAGS", "recovery": "RECOVERY_FLAGS"}[sub]
	if len(args) == 0 {
		return "make bench"
	}
	return "make bench " + v + "='" + strings.Join(args, " ") + "'"
}

// filledCopy copies the cached fill of size (filling it first when the
// cache lacks it) into dir, and records its size and keys in rep; size
// "0" leaves dir to an empty etcd.
func filledCopy(ctx context.Context, work, size, self, logs, dir string, rep *pitrReport) error {
	if size == "0" {
		return nil
	}
	n, err := parseSize(size)
	if err != nil {
		return err
	}
	cache := &fillCache{dir: filepath.Join(work, "etcd"), seed: 1, self: self, logs: logs}
	data, meta, _, err := cache.ensure(ctx, n, formatBytes(n))
	if err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	progress("copying the %s fill (%d keys)", formatBytes(n), meta.Keys)
	rep.Full, rep.Keys = formatBytes(n), meta.Keys
	return copyDir(data, dir)
}

// followLoad writes the load, waits for the follower to commit its last
// revision, stops it and fills rep with the commit lags and its peak.
func followLoad(ctx context.Context, etcd *etcdServer, child *exec.Cmd, lines <-chan pitrLine, rate, size int, d time.Duration, rep *pitrReport) error {
	cli, err := etcd.client()
	if err != nil {
		return err
	}
	defer cli.Close()
	done, err := writeLoad(ctx, cli, rate, size, d)
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
		return fmt.Errorf("follower: %w", err)
	}
	lags, err := commitLags(done, segs)
	if err != nil {
		return err
	}
	rep.Writes, rep.Seconds, rep.Segments, rep.HWM = len(done), d.Seconds(), len(segs), hwm
	rep.Rate = float64(len(done)) / done[len(done)-1].at.Sub(done[0].at).Seconds()
	rep.LagP50, rep.LagP99, rep.LagMax = quantile(lags, 0.5), quantile(lags, 0.99), lags[len(lags)-1]
	rep.RestoredRevision = last
	return nil
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
	// The follower dies with the bench, as etcd and MinIO do.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
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

// pitrReport holds the figures of a run of the "pitr" or "pitr-restore"
// subcommand, saved with the results.
type pitrReport struct {
	Started time.Time
	Command string
	// Commit is the commit measured ("" when the checkout was not clean).
	Commit string `json:",omitempty"`
	// Full and Keys describe the filled etcd the chain's full backup was
	// taken of ("" for an empty etcd).
	Full string `json:",omitempty"`
	Keys int64  `json:",omitempty"`
	// Asked is the write rate asked for, Rate the one done.
	Asked, Writes int
	Seconds, Rate float64
	Value         int
	Segments      int
	// HWM is the follower's peak RSS (VmHWM), its own full backup
	// included; ChainHWM its peak when its chain started, after its full
	// backup (0 when not recorded).
	HWM      int64
	ChainHWM int64 `json:",omitempty"`
	// Commit lags: from etcd's answer to a write to the commit of the
	// segment holding it.
	LagP50, LagP99, LagMax time.Duration
	// Replay figures: the events applied, the replay's duration, the
	// whole point restore's and the full backup's restore alone.
	Events                         int64
	Replay, PointTotal, FullOnly   time.Duration
	FullRevision, RestoredRevision int64
	// Compaction is the compaction of the chain to RestoredRevision and
	// the restore of that revision from the synthetic full backup; nil
	// when it was not measured.
	Compaction *compactReport `json:",omitempty"`
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
