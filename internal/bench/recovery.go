//go:build !benchlean

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The "recovery" subcommand measures a follower that resumes far behind:
// on a copy of the cached filled etcd (-full, 1 GiB by default) a
// follower (its own process, the lean binary) takes its chain's full
// backup and stops; -behind puts are written as fast as etcd takes them;
// then, while etcd takes -rate writes per second of -value bytes, the
// follower starts again. Measured from that start: when the newest state
// is protected again (a full backup, or a segment, at or past etcd's head
// at the start), when the lag (FollowEvent.Lag) is back under 2 s, when the
// old chain's tail is caught up (backup.RecoveryDone), and the lag the
// follower reported along the way.
//
//	bench-out/etcdbackup-bench recovery [-full 1GiB] [-behind 300000] [-rate 2000] [-value 1024] [-timeout 10m]
func runRecovery(args []string) error {
	fs := flag.NewFlagSet("recovery", flag.ContinueOnError)
	fullSize := fs.String("full", "1GiB", "size of the filled etcd (from the fill cache) the follower follows; 0 for an empty etcd")
	behind := fs.Int("behind", 300_000, "puts written while the follower is stopped")
	rate := fs.Int("rate", 2000, "writes per second while the follower recovers")
	valueSize := fs.Int("value", 1024, "value size in bytes")
	limit := fs.Duration("timeout", 10*time.Minute, "longest the recovery is followed")
	resume := fs.Bool("resume", false, "do nothing when the saved results hold this measure of this commit and run")
	work := fs.String("work", "bench-out", "directory for the fill cache, scratch files, logs and results")
	out := fs.String("out", "BENCHMARKS.md", "report to render again with these figures")
	chart := fs.String("chart", "BENCHMARKS.png", "chart to render again")
	if err := fs.Parse(args); err != nil {
		return err
	}
	command := pitrCommand("recovery", withoutFlag(args, "resume"))
	if *resume && stepDone(filepath.Join(*work, "results.json"), command, func(r *results) (time.Time, string, string) { return r.Recovery.step() }) {
		progress("recovery: measured already by this run, at this commit")
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	self, run, logs, err := scratchDirs(*work, "recovery-run")
	if err != nil {
		return err
	}
	defer os.RemoveAll(run)
	var fill pitrReport
	if err := filledCopy(ctx, *work, *fullSize, self, logs, filepath.Join(run, "etcd"), &fill); err != nil {
		return err
	}
	minio, err := startMinIO(ctx, minioBinary(), filepath.Join(run, "minio"), filepath.Join(logs, "recovery-minio.log"))
	if err != nil {
		return err
	}
	defer minio.stop(time.Minute)
	etcd, err := startEtcd(ctx, self, filepath.Join(run, "etcd"), filepath.Join(logs, "recovery-etcd.log"), false)
	if err != nil {
		return err
	}
	defer etcd.stop(time.Minute)
	env := modeEnv{Etcd: etcd.endpoint, S3: minio.addr, Access: minio.access, Secret: minio.secret, Bucket: benchBucket, Name: "recovery"}
	lean, err := leanBinary(self, backupModes)
	if err != nil {
		return err
	}
	cli, err := etcd.client()
	if err != nil {
		return err
	}
	defer cli.Close()
	rep := recoveryReport{Started: time.Now().UTC(), Command: command, Commit: cleanCommit(), Full: fill.Full, Keys: fill.Keys,
		Rate: *rate, Value: *valueSize}
	if err := followerBehind(ctx, lean, env, logs, cli, *behind, *valueSize); err != nil {
		return err
	}
	if err := measureRecovery(ctx, lean, env, logs, cli, *limit, &rep); err != nil {
		return err
	}
	progress("recovery: protected after %v, lag under 2 s after %v, tail after %v", rep.Protected, rep.LagUnder2s, rep.TailDone)
	return saveSection(filepath.Join(*work, "results.json"), *out, *chart, func(r *results) { r.Recovery = &rep })
}

// followerBehind runs a follower until its chain starts, stops it, and
// writes n puts of size bytes.
func followerBehind(ctx context.Context, lean string, env modeEnv, logs string, cli *clientv3.Client, n, size int) error {
	child, lines, err := startPITRFollower(lean, env, filepath.Join(logs, "recovery-follower-1.log"))
	if err != nil {
		return err
	}
	if l, ok := <-lines; !ok || l.Kind != "chain" {
		_ = child.Process.Kill()
		return errors.New("the follower did not start its chain")
	}
	if err := stopFollower(child, lines); err != nil {
		return err
	}
	progress("recovery: %d puts while the follower is stopped", n)
	var unbounded atomic.Int64
	unbounded.Store(1 << 62)
	_, err = burst(ctx, cli, n, size, &unbounded)
	return err
}

// stopFollower ends a follower child with SIGTERM, as a host stops it.
func stopFollower(child *exec.Cmd, lines <-chan pitrLine) error {
	_ = child.Process.Signal(syscall.SIGTERM)
	for range lines {
	}
	return child.Wait()
}

// measureRecovery starts the follower again under the write load and
// follows its lines until it is protected, its lag is under 2 s and its
// tail is done, or limit passes.
func measureRecovery(ctx context.Context, lean string, env modeEnv, logs string, cli *clientv3.Client, limit time.Duration, rep *recoveryReport) error {
	lctx, cancelLoad := context.WithCancel(ctx)
	defer cancelLoad()
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		_, _ = writeLoad(lctx, cli, rep.Rate, rep.Value, limit) // ends cancelled: its errors are the cancellation's
	}()
	head, err := cli.Get(ctx, "\x00", clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	rep.StartHead = head.Header.Revision
	start := time.Now()
	child, lines, err := startPITRFollower(lean, env, filepath.Join(logs, "recovery-follower-2.log"))
	if err != nil {
		return err
	}
	progress("recovery: follower started again at etcd's revision %d, %d writes/s", rep.StartHead, rep.Rate)
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	var tailLeft int64
	for rep.Protected == 0 || rep.LagUnder2s == 0 || (rep.TailDone == 0 && rep.TailErr == "") {
		var l pitrLine
		var ok bool
		select {
		case l, ok = <-lines:
		case <-deadline.C:
			ok = false
		case <-ctx.Done():
			_ = child.Process.Kill()
			return ctx.Err()
		}
		if !ok {
			break
		}
		rep.observe(l, start, &tailLeft)
	}
	cancelLoad()
	<-loaded
	return stopFollower(child, lines)
}

// recoveryReport is what the "recovery" subcommand measured.
type recoveryReport struct {
	Started time.Time
	Command string
	// Commit is the commit measured ("" when the checkout was not clean).
	Commit string `json:",omitempty"`
	// Full and Keys describe the filled etcd ("" for an empty one).
	Full string `json:",omitempty"`
	Keys int64  `json:",omitempty"`
	// Rate and Value are the writes while the follower recovered.
	Rate, Value int
	// StartHead is etcd's revision when the follower started again,
	// Behind how far behind it resumed (RecoveryStarted; 0 without).
	StartHead, Behind int64
	// Protected is the time from the follower's start to the commit of a
	// full backup or segment at or past StartHead; LagUnder2s to the first
	// segment of the chain followed committed with a lag under 2 s;
	// TailDone to the old chain's tail caught up (0: not within the run,
	// or not a recovery). FullRevision is the recovery's full backup's.
	Protected, LagUnder2s, TailDone time.Duration
	FullRevision                    int64  `json:",omitempty"`
	TailErr                         string `json:",omitempty"`
	// Lags are the lag figures the follower reported, one a second at
	// most.
	Lags []lagSample `json:",omitempty"`
}

// lagSample is a lag the follower reported, At after its start.
type lagSample struct {
	At        time.Duration
	Revisions int64
	Lag       time.Duration
	// Tail is the revisions the old chain's tail still lacked: the
	// recovery's full backup's revision, where it ends, less the last it
	// committed (0 before its first commit).
	Tail int64 `json:",omitempty"`
}

// observe records a line of the follower started at start.
func (r *recoveryReport) observe(l pitrLine, start time.Time, tailLeft *int64) {
	at := time.Unix(0, l.Committed).Sub(start)
	switch l.Kind {
	case "recovery":
		r.Behind = l.Head - (l.First - 1)
	case "chain":
		if r.Behind > 0 && r.Protected == 0 && l.First-1 >= r.StartHead {
			r.Protected, r.FullRevision = at, l.First-1
		}
	case "segment":
		if r.Protected == 0 && l.Last >= r.StartHead {
			r.Protected = at
		}
		if r.Protected > 0 && r.LagUnder2s == 0 && time.Duration(l.Lag) < 2*time.Second {
			r.LagUnder2s = at
		}
		if n := len(r.Lags); (n == 0 || at-r.Lags[n-1].At >= time.Second) && n < 1000 {
			r.Lags = append(r.Lags, lagSample{At: at, Revisions: max(l.Head-l.Last, 0), Lag: time.Duration(l.Lag), Tail: *tailLeft})
		}
	case "tail":
		// The tail ends at the recovery's full backup's revision.
		if r.FullRevision > 0 {
			*tailLeft = max(r.FullRevision-l.Last, 0)
		}
	case "recovered":
		*tailLeft = 0
		r.TailDone, r.TailErr = at, l.Err
	}
}

// The recovery targets.
const (
	protectedTarget = time.Minute
	lagBackTarget   = 5 * time.Minute
)

// renderRecovery writes the figures of the "recovery" subcommand.
func renderRecovery(r *recoveryReport) string {
	var b strings.Builder
	b.WriteString("### Recovery after an outage\n\n")
	if r == nil {
		b.WriteString("Not measured by this run: `etcdbackup-bench recovery` measures it (`make bench-recovery`).\n\n")
		return b.String()
	}
	full := "an empty etcd"
	if r.Full != "" {
		full = fmt.Sprintf("a copy of the %s etcd (%d keys)", r.Full, r.Keys)
	}
	fmt.Fprintf(&b, "Measured by `%s` (`etcdbackup-bench recovery`) on %s, one run. A follower (a process of its own, in the backup modes' lean binary) of %s takes its chain's full backup and stops; puts are written while it is stopped; then it starts again, %d revisions behind etcd's head (revision %d), while etcd takes %d writes/s of %d bytes. Times are from its start.\n\n",
		r.Command, r.Started.Format("2006-01-02 15:04 MST"), full, r.Behind, r.StartHead, r.Rate, r.Value)
	b.WriteString("| figure | measured | target |\n|---|---|---|\n")
	when := func(d time.Duration) string {
		if d <= 0 {
			return "not within the run"
		}
		return d.Round(time.Millisecond).String()
	}
	fmt.Fprintf(&b, "| newest state protected again (revision %d or later committed) | %s | <= %v: %s |\n", r.StartHead, when(r.Protected),
		protectedTarget, verdict(r.Protected > 0 && r.Protected <= protectedTarget))
	fmt.Fprintf(&b, "| lag back under 2 s | %s | <= %v: %s |\n", when(r.LagUnder2s), lagBackTarget, verdict(r.LagUnder2s > 0 && r.LagUnder2s <= lagBackTarget))
	tail := when(r.TailDone)
	if r.TailErr != "" {
		tail += " (ended short: " + r.TailErr + ")"
	}
	fmt.Fprintf(&b, "| old chain's tail caught up to the full backup's revision %d | %s | |\n", r.FullRevision, tail)
	var lags []string
	for i := 0; i < len(r.Lags); i += max(len(r.Lags)/10, 1) {
		s := r.Lags[i]
		l := fmt.Sprintf("%v: %d revisions, %v", s.At.Round(time.Second), s.Revisions, s.Lag.Round(time.Millisecond))
		if s.Tail > 0 {
			l += fmt.Sprintf(" (old chain's tail: %d revisions left)", s.Tail)
		}
		lags = append(lags, l)
	}
	fmt.Fprintf(&b, "| lag the follower reported along the way | %s | |\n\n", strings.Join(lags, "; "))
	return b.String()
}
