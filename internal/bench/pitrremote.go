//go:build !benchlean

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// The "pitr-remote" subcommand is the commit lag of "pitr" against the
// remote stores of the backup modes (MinIO over TLS at an RTT, through the
// bench's proxy, see startStores): a follower's segment is committed only
// once its data and manifest are stored, so every request's round trip is
// in the lag. It measures the lag and the follower's peak RSS only (no
// replay, no compaction), one store after the other, each on a fresh copy
// of the same fill.
//
//	bench-out/etcdbackup-bench pitr-remote [-stores tls,tls-100ms] [-full 256MiB] [-duration 20s] [-rate 1000]

func runPITRRemote(args []string) error {
	fs := flag.NewFlagSet("pitr-remote", flag.ContinueOnError)
	stores := fs.String("stores", "tls,tls-50ms,tls-100ms", "remote stores to follow into, comma-separated")
	duration := fs.Duration("duration", 20*time.Second, "how long the writes run against each store")
	rate := fs.Int("rate", 1000, "writes per second")
	valueSize := fs.Int("value", 1024, "value size in bytes")
	fullSize := fs.String("full", "256MiB", "size of the filled etcd the follower takes its own full backup of first; 0 for an empty etcd")
	work := fs.String("work", "bench-out", "directory for the fill cache, scratch files, logs and results")
	out := fs.String("out", "BENCHMARKS.md", "report to render again with these figures")
	chart := fs.String("chart", "BENCHMARKS.png", "chart to render again")
	resume := fs.Bool("resume", false, "do nothing when the saved results hold this step of the same run, commit and flags")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var sts []remoteStore
	var names []string
	for name := range strings.SplitSeq(*stores, ",") {
		st, ok := findStore(strings.TrimSpace(name))
		if !ok {
			return fmt.Errorf("unknown store %q", name)
		}
		sts, names = append(sts, st), append(names, st.name)
	}
	command := pitrRemoteCommand(withoutFlag(args, "resume"))
	if *resume && stepDone(filepath.Join(*work, "results.json"), command, func(r *results) (time.Time, string, string) { return remoteStep(r.ContinuousRemote, names) }) {
		progress("pitr-remote: done in the saved results of this commit")
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	got := map[string]*pitrReport{}
	for _, st := range sts {
		rep := &pitrReport{Started: time.Now().UTC(), Command: command, Commit: cleanCommit(), Asked: *rate, Value: *valueSize}
		if err := followRemote(ctx, st, *work, *fullSize, *rate, *valueSize, *duration, rep); err != nil {
			return fmt.Errorf("store %s: %w", st.name, err)
		}
		progress("pitr-remote %s: commit lag p50 %v p99 %v, follower peak RSS %s", st.name, rep.LagP50, rep.LagP99, formatBytes(rep.HWM))
		got[st.name] = rep
	}
	return saveSection(filepath.Join(*work, "results.json"), *out, *chart, func(r *results) { r.ContinuousRemote = got })
}

func pitrRemoteCommand(args []string) string {
	if len(args) == 0 {
		return "make bench"
	}
	return "make bench PITR_REMOTE_FLAGS='" + strings.Join(args, " ") + "'"
}

// followRemote runs one follower into st for d, as runPITR does into the
// loopback MinIO.
func followRemote(ctx context.Context, st remoteStore, work, fullSize string, rate, size int, d time.Duration, rep *pitrReport) error {
	self, run, logs, err := scratchDirs(work, "pitr-remote-run")
	if err != nil {
		return err
	}
	defer os.RemoveAll(run)
	if err := filledCopy(ctx, work, fullSize, self, logs, filepath.Join(run, "etcd"), rep); err != nil {
		return err
	}
	minio, err := startMinIO(ctx, minioBinary(), filepath.Join(run, "minio"), filepath.Join(logs, "pitr-remote-minio.log"))
	if err != nil {
		return err
	}
	defer minio.stop(time.Minute)
	cert, caFile, err := writeCertificate(run)
	if err != nil {
		return err
	}
	proxy, err := startStoreProxy(ctx, st, minio.addr, cert, caFile)
	if err != nil {
		return err
	}
	defer proxy.close()
	etcd, err := startEtcd(ctx, self, filepath.Join(run, "etcd"), filepath.Join(logs, "pitr-remote-etcd.log"), false)
	if err != nil {
		return err
	}
	defer etcd.stop(time.Minute)
	env := modeEnv{Etcd: etcd.endpoint, S3: proxy.addr, CAFile: proxy.caFile, Access: minio.access, Secret: minio.secret, Bucket: benchBucket, Name: "pitr-" + st.name}
	lean, err := leanBinary(self, backupModes)
	if err != nil {
		return err
	}
	logPath := filepath.Join(logs, "pitr-remote-follower-"+st.name+".log")
	child, lines, err := startPITRFollower(lean, env, logPath)
	if err != nil {
		return err
	}
	defer func() { _ = child.Process.Kill() }()
	if l, ok := <-lines; !ok || l.Kind != "chain" {
		return errors.New("the follower did not start its chain")
	}
	progress("pitr-remote %s: follower started; %d writes/s of %d bytes for %v", st.name, rate, size, d)
	if err := followLoad(ctx, etcd, child, lines, rate, size, d, rep); err != nil {
		return fmt.Errorf("%w (log %s)", err, logPath)
	}
	return nil
}

// renderContinuousRemote writes the figures of "pitr-remote".
func renderContinuousRemote(m map[string]*pitrReport) string {
	var b strings.Builder
	b.WriteString("### Continuous backup to a remote store\n\n")
	if len(m) == 0 {
		b.WriteString("Not measured by this run: `make bench` runs `etcdbackup-bench pitr-remote` after pitr.\n\n")
		return b.String()
	}
	var any *pitrReport
	for _, st := range remoteStores {
		if c := m[st.name]; c != nil {
			any = c
			break
		}
	}
	if any == nil {
		return ""
	}
	full := "an empty etcd"
	if any.Full != "" {
		full = fmt.Sprintf("a copy of the %s etcd", any.Full)
	}
	fmt.Fprintf(&b, "Measured by `%s` (`etcdbackup-bench pitr-remote`), one run per store: the follower of the section above, started on %s, into MinIO as a remote store (the backup modes' proxy, see the remote-store tables); every segment's data and manifest cross the store's round trips before its commit.\n\n", any.Command, full)
	b.WriteString("| store | writes/s asked, done | segments | commit lag p50 | p99 | max | follower peak RSS |\n|---|---|---|---|---|---|---|\n")
	names := make([]string, 0, len(m))
	for _, st := range remoteStores {
		if m[st.name] != nil {
			names = append(names, st.name)
		}
	}
	for name := range m {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	for _, name := range names {
		c := m[name]
		desc := name
		if st, ok := findStore(name); ok {
			desc = st.describe()
		}
		fmt.Fprintf(&b, "| %s | %d, %.0f | %d | %s | %s | %s | %s |\n", desc, c.Asked, c.Rate, c.Segments,
			c.LagP50.Round(time.Millisecond), c.LagP99.Round(time.Millisecond), c.LagMax.Round(time.Millisecond), formatBytes(c.HWM))
	}
	b.WriteString("\n")
	return b.String()
}
