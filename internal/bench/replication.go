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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/replicate"
)

// The "replicate" subcommand measures replication: a follower (the pitr
// follower, a process of its own in the lean binary, flushing at its
// default of every second) stores a chain on one MinIO server while an
// etcd takes -rate writes per second for -duration, and a replicator (a
// process of its own running replicate.Copier every -interval, as a
// scheduler's replication job does each run) copies what it stores to a
// second MinIO server. The replication lag of a segment is the time from
// its commit on the source to its commit on the target; the replicator's
// resident set is sampled after every copy, to show it bounded whatever
// the chain's length. The figures go into results.json, and the report is
// rendered again.
//
//	bench-out/etcdbackup-bench replicate [-duration 60s] [-rate 1000] [-value 1024] [-interval 1s]

// replicationReport holds the figures of a run of the "replicate"
// subcommand, saved with the results.
type replicationReport struct {
	Started time.Time
	Command string
	// Commit is the commit measured ("" when the checkout was not clean).
	Commit   string `json:",omitempty"`
	Asked    int
	Writes   int
	Value    int
	Seconds  float64
	Interval time.Duration
	// Segments is the number of segments the follower committed; Copied
	// those the replicator copied; Rounds its copies.
	Segments, Copied, Rounds int
	// Replication lag: from a segment's commit on the source to its
	// commit on the target.
	LagP50, LagP99, LagMax time.Duration
	// WriteLagP99 is from etcd's answer to a write to the commit on the
	// target of the segment holding it.
	WriteLagP99 time.Duration
	// HWM is the replicator's peak RSS (VmHWM); RSSHalf and RSSEnd its
	// largest resident set sampled after a copy in the first half of the
	// writes and in the second half.
	HWM, RSSHalf, RSSEnd int64
}

// replicationRSSTarget is the replicator's peak RSS bound the report judges.
const replicationRSSTarget = 64 << 20

func runReplication(args []string) error {
	fs := flag.NewFlagSet("replicate", flag.ContinueOnError)
	duration := fs.Duration("duration", 60*time.Second, "how long the writes run")
	rate := fs.Int("rate", 1000, "writes per second")
	valueSize := fs.Int("value", 1024, "value size in bytes")
	interval := fs.Duration("interval", time.Second, "time between the replicator's copies")
	work := fs.String("work", "bench-out", "directory for scratch files, logs and results")
	out := fs.String("out", "BENCHMARKS.md", "report to render again with these figures")
	chart := fs.String("chart", "BENCHMARKS.png", "chart to render again")
	resume := fs.Bool("resume", false, "do nothing when the saved results hold this step of the same run, commit and flags")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cmd := "make bench"
	if a := withoutFlag(args, "resume"); len(a) > 0 {
		cmd = "make bench REPLICATE_FLAGS='" + strings.Join(a, " ") + "'"
	}
	if *resume && stepDone(filepath.Join(*work, "results.json"), cmd, func(r *results) (time.Time, string, string) { return r.Replication.step() }) {
		progress("replicate: done in the saved results of this commit")
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	self, run, logs, err := scratchDirs(*work, "replicate-run")
	if err != nil {
		return err
	}
	defer os.RemoveAll(run)
	rep := replicationReport{Started: time.Now().UTC(), Command: cmd, Commit: cleanCommit(), Asked: *rate, Value: *valueSize, Interval: *interval}
	from, err := startMinIO(ctx, minioBinary(), filepath.Join(run, "minio-a"), filepath.Join(logs, "replicate-minio-a.log"))
	if err != nil {
		return err
	}
	defer from.stop(time.Minute)
	to, err := startMinIOAs(ctx, minioBinary(), filepath.Join(run, "minio-b"), filepath.Join(logs, "replicate-minio-b.log"), from.access, from.secret)
	if err != nil {
		return err
	}
	defer to.stop(time.Minute)
	etcd, err := startEtcd(ctx, self, filepath.Join(run, "etcd"), filepath.Join(logs, "replicate-etcd.log"), false)
	if err != nil {
		return err
	}
	defer etcd.stop(time.Minute)
	env := modeEnv{Etcd: etcd.endpoint, S3: from.addr, To: to.addr, Access: from.access, Secret: from.secret, Bucket: benchBucket, Name: "replicate"}
	lean, err := leanBinary(self, backupModes)
	if err != nil {
		return err
	}
	follower, flines, err := startPITRFollower(lean, env, filepath.Join(logs, "replicate-follower.log"))
	if err != nil {
		return err
	}
	defer func() { _ = follower.Process.Kill() }()
	if l, ok := <-flines; !ok || l.Kind != "chain" {
		return errors.New("the follower did not start its chain")
	}
	replicator, rlines, err := startReplicator(self, env, *interval, filepath.Join(logs, "replicate-copier.log"))
	if err != nil {
		return err
	}
	defer func() { _ = replicator.Process.Kill() }()
	progress("replicate: follower started; %d writes/s of %d bytes for %v, a copy every %v", *rate, *valueSize, *duration, *interval)
	if err := replicationLoad(ctx, etcd, follower, flines, replicator, rlines, *duration, &rep); err != nil {
		return fmt.Errorf("%w (logs %s)", err, filepath.Join(logs, "replicate-*.log"))
	}
	progress("replicate: lag p99 %v, replicator peak RSS %s", rep.LagP99, formatBytes(rep.HWM))
	return saveSection(filepath.Join(*work, "results.json"), *out, *chart, func(r *results) { r.Replication = &rep })
}

// replicationLoad writes the load, waits for the replicator to copy the
// segment of the last revision, stops both children and fills rep.
func replicationLoad(ctx context.Context, etcd *etcdServer, follower *exec.Cmd, flines <-chan pitrLine,
	replicator *exec.Cmd, rlines <-chan replicaLine, d time.Duration, rep *replicationReport) error {
	cli, err := etcd.client()
	if err != nil {
		return err
	}
	defer cli.Close()
	var (
		mu     sync.Mutex
		segs   []pitrLine
		copied []replicaLine
		rounds []replicaLine
		hwm    int64
		last   = map[string]int64{} // segment ID -> last revision
		wg     sync.WaitGroup
	)
	wg.Go(func() {
		for l := range flines {
			if l.Kind == "segment" {
				mu.Lock()
				segs = append(segs, l)
				last[l.ID] = l.Last
				mu.Unlock()
			}
		}
	})
	wg.Go(func() {
		for l := range rlines {
			mu.Lock()
			switch l.Kind {
			case "copied":
				copied = append(copied, l)
			case "round":
				rounds = append(rounds, l)
			case "end":
				hwm = l.HWM
			}
			mu.Unlock()
		}
	})
	started := time.Now()
	done, err := writeLoad(ctx, cli, rep.Asked, rep.Value, d)
	if err != nil {
		return err
	}
	lastRev := done[len(done)-1].rev
	onTarget := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(copied, func(l replicaLine) bool { return last[l.ID] >= lastRev })
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(2 * time.Minute)
	for !onTarget() {
		select {
		case <-tick.C:
		case <-deadline:
			return errors.New("the replicator did not copy the last revision within 2 minutes")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	_ = follower.Process.Signal(syscall.SIGTERM)
	_ = replicator.Process.Signal(syscall.SIGTERM)
	errF, errR := follower.Wait(), replicator.Wait()
	wg.Wait()
	if err := errors.Join(errF, errR); err != nil {
		return fmt.Errorf("children: %w", err)
	}
	return fillReplication(rep, done, segs, copied, rounds, hwm, started.Add(d/2))
}

// fillReplication computes rep's figures from what the children said.
func fillReplication(rep *replicationReport, done []written, segs []pitrLine, copied, rounds []replicaLine, hwm int64, half time.Time) error {
	source := map[string]pitrLine{}
	for _, s := range segs {
		source[s.ID] = s
	}
	var lags []time.Duration
	var onTarget []pitrLine
	for _, c := range copied {
		s, ok := source[c.ID]
		if !ok {
			continue
		}
		lags = append(lags, time.Duration(c.Committed-s.Committed))
		onTarget = append(onTarget, pitrLine{First: s.First, Last: s.Last, Committed: c.Committed})
	}
	if len(lags) == 0 {
		return errors.New("the replicator copied no segment the follower reported")
	}
	slices.Sort(lags)
	writeLags, err := commitLags(done, onTarget)
	if err != nil {
		return fmt.Errorf("writes on the target: %w", err)
	}
	for _, r := range rounds {
		if time.Unix(0, r.Committed).Before(half) {
			rep.RSSHalf = max(rep.RSSHalf, r.RSS)
		} else {
			rep.RSSEnd = max(rep.RSSEnd, r.RSS)
		}
	}
	rep.Writes, rep.Seconds = len(done), done[len(done)-1].at.Sub(done[0].at).Seconds()
	rep.Segments, rep.Copied, rep.Rounds, rep.HWM = len(segs), len(copied), len(rounds), hwm
	rep.LagP50, rep.LagP99, rep.LagMax = quantile(lags, 0.5), quantile(lags, 0.99), lags[len(lags)-1]
	rep.WriteLagP99 = quantile(writeLags, 0.99)
	return nil
}

// replicaLine is one line the replicator child writes on stdout.
type replicaLine struct {
	Kind      string `json:"kind"`       // "copied", "round", "end"
	ID        string `json:",omitempty"` // the segment's, for "copied"
	Committed int64  `json:",omitempty"` // Unix nanoseconds
	RSS, HWM  int64  `json:",omitempty"`
}

// startReplicator starts the replicator child; its lines come on the
// returned channel, which is closed when its stdout ends.
func startReplicator(self string, env modeEnv, interval time.Duration, logPath string) (*exec.Cmd, <-chan replicaLine, error) {
	cmd := exec.Command(self, "replicate-copy", "-interval", interval.String())
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
		_ = logf.Close()
		return nil, nil, err
	}
	if err := json.NewEncoder(stdin).Encode(env); err != nil {
		return nil, nil, err
	}
	_ = stdin.Close()
	lines := make(chan replicaLine, 1024)
	go func() {
		defer close(lines)
		defer logf.Close()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var l replicaLine
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				lines <- l
			}
		}
	}()
	return cmd, lines, nil
}

// runReplicator is the "replicate-copy" subcommand: a copy of env's
// cluster "bench" from env.S3 to env.To every interval until SIGTERM,
// reporting each segment copied and the resident set after each copy.
func runReplicator(args []string) error {
	fs := flag.NewFlagSet("replicate-copy", flag.ContinueOnError)
	interval := fs.Duration("interval", time.Second, "time between copies")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var env modeEnv
	if err := json.NewDecoder(os.Stdin).Decode(&env); err != nil {
		return fmt.Errorf("read environment: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	src, err := env.bucket()
	if err != nil {
		return err
	}
	toEnv := env
	toEnv.S3 = env.To
	dst, err := toEnv.bucket()
	if err != nil {
		return err
	}
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	emit := func(l replicaLine) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(l)
	}
	c := &replicate.Copier{Source: src, SourceName: "primary", Target: replicate.Target{Name: "offsite", Bucket: dst},
		Logger: traceLogger(),
		Observer: replicate.ObserverFunc(func(e replicate.Event) {
			if e.Kind == replicate.Done && e.Item.Kind == backup.KindDelta && (e.Item.Outcome == replicate.Copied || e.Item.Outcome == replicate.Resumed) {
				emit(replicaLine{Kind: "copied", ID: e.Item.ID, Committed: e.Time.UnixNano()})
			}
		})}
	t := time.NewTicker(*interval)
	defer t.Stop()
	for ctx.Err() == nil {
		if _, err := c.Copy(ctx, "bench", replicate.Selection{All: true}); err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "copy:", err)
		}
		emit(replicaLine{Kind: "round", Committed: time.Now().UnixNano(), RSS: selfStatus("VmRSS:")})
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	emit(replicaLine{Kind: "end", HWM: selfHWM()})
	return nil
}

// renderReplication writes the figures of the "replicate" subcommand.
func renderReplication(c *replicationReport) string {
	var b strings.Builder
	b.WriteString("## Replication\n\n")
	if c == nil {
		b.WriteString("Not measured by this run: `make bench` runs `etcdbackup-bench replicate` after continuous backup.\n\n")
		return b.String()
	}
	fmt.Fprintf(&b, "Measured by `%s` (`etcdbackup-bench replicate`) on %s, one run. A follower (the continuous-backup follower, flushing every second) stores a chain on one MinIO server while an empty etcd takes %d writes of %d-byte values, asked at %d/s, in %.0f s; a replicator, a process of its own running `replicate.Copier` every %v as a scheduler's replication job does each run, copies it to a second MinIO server on the same machine. The replication lag of a segment is from its commit on the source to its commit on the target; the replicator's resident set is sampled after each copy.\n\n",
		c.Command, c.Started.Format("2006-01-02 15:04 MST"), c.Writes, c.Value, c.Asked, c.Seconds, c.Interval)
	b.WriteString("| figure | measured | target |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| segments committed on the source / copied / copies run | %d / %d / %d | |\n", c.Segments, c.Copied, c.Rounds)
	fmt.Fprintf(&b, "| replication lag p50 | %s | |\n", c.LagP50.Round(time.Millisecond))
	fmt.Fprintf(&b, "| replication lag p99 | %s | <= %v (the copy interval and one copy): %s |\n", c.LagP99.Round(time.Millisecond), c.Interval+lagTarget, verdict(c.LagP99 <= c.Interval+lagTarget))
	fmt.Fprintf(&b, "| replication lag max | %s | |\n", c.LagMax.Round(time.Millisecond))
	fmt.Fprintf(&b, "| write on etcd to its segment on the target, p99 | %s | |\n", c.WriteLagP99.Round(time.Millisecond))
	fmt.Fprintf(&b, "| replicator peak RSS (VmHWM) | %s | <= %d MiB: %s |\n", formatBytes(c.HWM), replicationRSSTarget>>20, verdict(c.HWM <= replicationRSSTarget))
	fmt.Fprintf(&b, "| replicator RSS after a copy, largest in the first / second half of the writes | %s / %s | |\n", formatBytes(c.RSSHalf), formatBytes(c.RSSEnd))
	b.WriteString("\n")
	return b.String()
}
