//go:build !benchlean

// Command etcdbackup-bench measures backups of an etcd to MinIO: the
// two-step approach of cron-job tools (snapshot to a file, then upload the
// file) against etcdbackup's streaming pipeline with and without
// compression and encryption, and its spool mode. It writes the figures to
// BENCHMARKS.md with a chart of wall time and peak RSS against etcd size.
//
// `make bench` builds and runs it. By hand, from the module root:
//
//	go build -o bench-out/etcdbackup-bench ./internal/bench
//	go build -tags benchlean -o bench-out/etcdbackup-bench-lean ./internal/bench
//	go build -trimpath -tags disable_grpc_modules -ldflags='-s -w' -o /tmp/cli/etcdbackup ./examples/etcdbackup
//	bench-out/etcdbackup-bench -cli /tmp/cli/etcdbackup [-sizes 256MiB,1GiB,2GiB] [-runs 5] [-modes two-step,stream,...]
//	bench-out/etcdbackup-bench pitr          # continuous backup: commit lag, follower RSS, replay speed
//	bench-out/etcdbackup-bench pitr-remote   # its commit lag against the remote stores
//	bench-out/etcdbackup-bench pitr-restore  # a point restore after an hour of writes
//	bench-out/etcdbackup-bench seed          # 1,000 continuous jobs of one scheduler over 10 etcds
//	bench-out/etcdbackup-bench report        # render BENCHMARKS.md again from bench-out/results.json
//
// Every step saves what it measured in bench-out/results.json and renders
// the whole of BENCHMARKS.md from it, notes included (notes.md is a
// template whose figures come from the results): nothing in the report is
// typed in. Wall-time verdicts rest on at least minQuietRounds quiet
// rounds, each run paired with the baseline's run next to it (roundOrder).
//
// etcd and MinIO run as processes of their own, and so does every run of a
// mode, so that the peak RSS and CPU time reported for a mode are those of
// the backup alone: the binary re-executes itself with the "etcd"
// subcommand, and with the "mode" subcommand for the restore modes; backup
// modes run in etcdbackup-bench-lean, this package built with the
// benchlean tag, which links what a host backing up links and not the
// bench's etcd server, generator or report (see leanBinary). The etcd is filled with Kubernetes-like data
// (see gen.go) to each size; filled data directories are kept under
// bench-out/etcd and reused by later runs.
//
// A new mode that runs as rounds on each etcd size joins modes (modes.go)
// with a group: its rows are rendered with its group's table, and a group
// of its own needs its table in renderReport. A new step with a section
// of its own (as pitr) is a subcommand here that fills a field of results
// through saveSection, recording its Started, Command and Commit
// (cleanCommit), takes -resume and returns early when stepDone says the
// saved results hold it; renderReport renders the field, saying "not
// measured by this run" when it is nil; the Makefile's bench target runs
// it with $(BENCH_RESUME); notes_test.go's fixture holds a section of it;
// notes.md quotes its figures only through notesFuncs.
package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"filippo.io/age"
	"go.etcd.io/etcd/api/v3/version"

	"github.com/etcdbackup/etcdbackup/backup"
)

// twoStepPartSize is the part size of the two-step upload: what minio-go
// (and so `mc cp`) picks for a file of a few GiB.
const twoStepPartSize = 16 << 20

func main() {
	args := os.Args[1:]
	var err error
	switch {
	case len(args) > 0 && args[0] == "etcd":
		err = runEtcd(args[1:])
	case len(args) > 0 && args[0] == "mode":
		err = runModeChild(args[1:])
	case len(args) > 0 && args[0] == "report":
		err = runReport(args[1:])
	case len(args) > 0 && args[0] == "pitr":
		err = runPITR(args[1:])
	case len(args) > 0 && args[0] == "pitr-remote":
		err = runPITRRemote(args[1:])
	case len(args) > 0 && args[0] == "pitr-restore":
		err = runPITRRestore(args[1:])
	case len(args) > 0 && args[0] == "recovery":
		err = runRecovery(args[1:])
	case len(args) > 0 && args[0] == "pitr-follow":
		err = runPITRFollower()
	case len(args) > 0 && args[0] == "replicate":
		err = runReplication(args[1:])
	case len(args) > 0 && args[0] == "replicate-copy":
		err = runReplicator(args[1:])
	case len(args) > 0 && args[0] == "followers":
		err = runFollowers(args[1:])
	case len(args) > 0 && args[0] == "seed":
		err = runSeed(args[1:])
	default:
		err = runBench(args)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdbackup-bench:", err)
		os.Exit(1)
	}
}

// config is what the command line sets.
type config struct {
	sizes     []int64
	runs      int
	runsLarge int
	// maxRuns bounds the rounds added for want of quiet rounds.
	maxRuns int
	// restoreRuns multiplies the runs of restore modes, which are short
	// and vary more from run to run with the disk.
	restoreRuns int
	// refRuns bounds the rounds reference modes run in: they carry no
	// wall-time verdict, and the logical ones are the longest runs.
	refRuns int
	// remoteSizes are the sizes the remote-store groups run on.
	remoteSizes []int64
	modes       []mode
	work        string
	out         string
	chart       string
	seed        int64
	trace       bool
	profile     string
	// cli is the etcdbackup command of the CLI modes.
	cli  string
	args []string
	// resume continues the saved results of the same commit, flags and
	// machine (resumable): only the groups they do not record run.
	resume bool
}

func parseConfig(args []string) (*config, error) {
	fs := flag.NewFlagSet("etcdbackup-bench", flag.ContinueOnError)
	sizes := fs.String("sizes", "256MiB,1GiB,2GiB", "etcd database sizes to measure, comma-separated")
	runs := fs.Int("runs", 5, "rounds of each mode per size up to 1 GiB; the report shows medians")
	runsLarge := fs.Int("runs-large", 5, "rounds of each mode per size above 1 GiB")
	maxRuns := fs.Int("max-runs", 7, "rounds at most, when a compared mode has fewer than 5 quiet rounds after -runs (-runs-large)")
	restoreRuns := fs.Int("restore-runs", 2, "the local restore group runs this many times as many rounds as the backup groups")
	refRuns := fs.Int("ref-runs", 3, "reference modes (ref) run in this many rounds of their group at most")
	remoteSizes := fs.String("remote-sizes", "1GiB", "sizes the remote-store groups (TLS, added RTT) run on, comma-separated, among -sizes")
	modeList := fs.String("modes", "", "modes to run, comma-separated (default: all)")
	work := fs.String("work", "bench-out", "directory for the fill cache, logs, temporary files and results")
	out := fs.String("out", "BENCHMARKS.md", "report to write")
	chart := fs.String("chart", "BENCHMARKS.png", "chart to write")
	seed := fs.Int64("seed", 1, "seed of the generated data")
	trace := fs.Bool("trace", false, "make every mode log its steps to standard error")
	profile := fs.String("profile", "", "directory for a CPU profile of every mode run (pprof)")
	cli := fs.String("cli", "", "the etcdbackup command the CLI modes run, built as make release builds it (make bench builds it into a temporary directory)")
	resume := fs.Bool("resume", false, "continue the saved results of an unfinished run of the same clean commit, flags, machine and toolchain: run only the groups they lack")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *profile != "" {
		if err := os.MkdirAll(*profile, 0o755); err != nil {
			return nil, fmt.Errorf("-profile: %w", err)
		}
	}
	c := &config{runs: *runs, runsLarge: *runsLarge, maxRuns: *maxRuns, restoreRuns: *restoreRuns, refRuns: *refRuns, work: *work, out: *out, chart: *chart, seed: *seed, trace: *trace, profile: *profile, cli: *cli, args: args, resume: *resume}
	for s := range strings.SplitSeq(*sizes, ",") {
		n, err := parseSize(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		c.sizes = append(c.sizes, n)
	}
	slices.Sort(c.sizes)
	for s := range strings.SplitSeq(*remoteSizes, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := parseSize(s)
		if err != nil {
			return nil, fmt.Errorf("-remote-sizes: %w", err)
		}
		c.remoteSizes = append(c.remoteSizes, n)
	}
	if *modeList == "" {
		c.modes = modes
	} else {
		for name := range strings.SplitSeq(*modeList, ",") {
			m, ok := findMode(strings.TrimSpace(name))
			if !ok {
				return nil, fmt.Errorf("unknown mode %q", name)
			}
			c.modes = append(c.modes, m)
		}
	}
	if !slices.ContainsFunc(c.sizes, func(n int64) bool { return slices.Contains(c.remoteSizes, n) }) && slices.ContainsFunc(c.modes, func(m mode) bool { return m.store != "" }) {
		progress("the remote-store groups run on none of -sizes: -remote-sizes is %s", *remoteSizes)
	}
	if c.runs < 1 || c.runsLarge < 1 || c.restoreRuns < 1 || c.refRuns < 1 {
		return nil, errors.New("-runs, -runs-large, -restore-runs and -ref-runs must be at least 1")
	}
	if slices.ContainsFunc(c.modes, func(m mode) bool { return strings.HasPrefix(m.name, "cli-") }) {
		if c.cli == "" {
			return nil, errors.New("the CLI modes need -cli PATH: the etcdbackup command built as make release builds it (make bench does)")
		}
		abs, err := filepath.Abs(c.cli)
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(abs); err != nil {
			return nil, fmt.Errorf("-cli: %w", err)
		}
		c.cli = abs
	}
	return c, nil
}

// bench is one measuring run.
type bench struct {
	cfg  *config
	self string
	// lean is the backup modes' binary (see leanBinary).
	lean  string
	run   string // scratch directory of this run
	logs  string
	minio *minioServer
	// stores are the remote stores' proxies in front of minio, by name.
	stores map[string]*storeProxy
	// minioTo is the copy modes' second server; nil without copy modes.
	minioTo *minioServer
	res     *results
	// identity is the age identity of the encrypted backups and their
	// restores.
	identity string
}

func runBench(args []string) error {
	cfg, err := parseConfig(args)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	id, err := age.GenerateX25519Identity()
	if err != nil {
		return err
	}
	lean, err := leanBinary(self, cfg.modes)
	if err != nil {
		return err
	}
	b := &bench{cfg: cfg, self: self, lean: lean, run: filepath.Join(cfg.work, "run"), logs: filepath.Join(cfg.work, "logs"), identity: id.String()}
	if err := os.RemoveAll(b.run); err != nil {
		return err
	}
	for _, d := range []string{b.run, b.logs, filepath.Join(b.run, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	defer os.RemoveAll(b.run)

	if err := b.startResults(cfg); err != nil {
		return err
	}

	progress("machine: %d CPUs, %s of memory, %s; load average %.2f", b.res.Machine.CPUs, formatBytes(b.res.Machine.MemoryBytes), b.res.Machine.GoVersion, loadAverage())
	b.minio, err = startMinIO(ctx, minioBinary(), filepath.Join(b.run, "minio"), filepath.Join(b.logs, "minio.log"))
	if err != nil {
		return err
	}
	defer b.minio.stop(time.Minute)
	if b.stores, err = startStores(ctx, cfg.modes, b.minio.addr, b.run); err != nil {
		return err
	}
	for _, p := range b.stores {
		defer p.close()
	}
	if slices.ContainsFunc(cfg.modes, func(m mode) bool { return m.group == groupCopy }) {
		b.minioTo, err = startMinIOAs(ctx, minioBinary(), filepath.Join(b.run, "minio-to"), filepath.Join(b.logs, "minio-to.log"), b.minio.access, b.minio.secret)
		if err != nil {
			return err
		}
		defer b.minioTo.stop(time.Minute)
	}

	cache := &fillCache{dir: filepath.Join(cfg.work, "etcd"), seed: cfg.seed, self: self, logs: b.logs}
	for _, size := range cfg.sizes {
		if b.sizeDone(size) {
			progress("%s: every group done in the saved results", formatBytes(size))
			continue
		}
		if err := b.measureSize(ctx, cache, size); err != nil {
			return err
		}
	}
	b.res.Finished = time.Now().UTC()
	if err := b.res.save(filepath.Join(cfg.work, "results.json")); err != nil {
		return err
	}
	if err := writeOutputs(b.res, cfg.out, cfg.chart); err != nil {
		return err
	}
	progress("wrote %s and %s in %v", cfg.out, cfg.chart, time.Since(b.res.Started).Round(time.Second))
	return nil
}

// measureSize fills (or reuses) an etcd of size bytes and runs every mode
// on it cfg.runs times (cfg.runsLarge times above 1 GiB; restore modes
// cfg.restoreRuns times as often).
func (b *bench) measureSize(ctx context.Context, cache *fillCache, size int64) error {
	label := formatBytes(size)
	fillStart := time.Now()
	data, meta, cached, err := cache.ensure(ctx, size, label)
	if err != nil {
		return fmt.Errorf("fill %s: %w", label, err)
	}
	if cached {
		progress("fill %s: reusing %s", label, filepath.Dir(data))
	} else {
		progress("fill %s: done in %v", label, time.Since(fillStart).Round(time.Second))
	}
	etcd, err := startEtcd(ctx, b.self, data, filepath.Join(b.logs, "etcd.log"), false)
	if err != nil {
		return err
	}
	defer etcd.stop(2 * time.Minute)
	st, err := etcd.status(ctx)
	if err != nil {
		return err
	}
	runs := b.cfg.runs
	if size > 1<<30 {
		runs = b.cfg.runsLarge
	}
	info := sizeInfo{Label: label, Target: size, DBSize: st.DbSize, DBSizeInUse: st.DbSizeInUse, Keys: meta.Keys, KVBytes: meta.KVBytes, FillSeconds: meta.Seconds, Cached: cached, Runs: runs, RestoreRuns: runs * b.cfg.restoreRuns}
	i := b.sizeIndex(label)
	if i >= 0 {
		// A resumed run keeps the rounds of the groups done.
		info.Runs, info.RestoreRuns = b.res.Sizes[i].Runs, b.res.Sizes[i].RestoreRuns
	}
	// An untimed read first brings the database into the page cache, so
	// the first mode measured does not pay for the disk alone.
	raw, err := warmUp(ctx, etcd)
	if err != nil {
		return err
	}
	info.Raw = raw
	if i < 0 {
		b.res.Sizes, i = append(b.res.Sizes, info), len(b.res.Sizes)
	} else {
		b.res.Sizes[i] = info
	}
	progress("etcd %s: database %s (%s in use), %d keys, snapshot %s; load average %.2f", label, formatBytes(st.DbSize), formatBytes(st.DbSizeInUse), meta.Keys, formatBytes(raw), loadAverage())

	for _, g := range b.groupsOn(size) {
		if b.res.groupDone(label, g[0].group) {
			progress("%s %s: done in the saved results", label, g[0].group)
			continue
		}
		started := time.Now().UTC()
		var sources map[string]preparedBackup
		if isRestoreGroup(g[0].group) || g[0].group == groupCopy {
			if sources, err = b.prepareSources(ctx, etcd, g, label); err != nil {
				return err
			}
		}
		rounds, most := runs, max(runs, b.cfg.maxRuns)
		if g[0].group == groupRestore {
			rounds, most = runs*b.cfg.restoreRuns, max(runs*b.cfg.restoreRuns, b.cfg.maxRuns*b.cfg.restoreRuns)
		}
		done, err := b.runRounds(ctx, etcd, g, label, rounds, most, sources)
		if err != nil {
			return err
		}
		switch g[0].group {
		case groupRestore:
			b.res.Sizes[i].RestoreRuns = done
		case groupBackup:
			b.res.Sizes[i].Runs = done
		}
		if err := b.minio.emptyBucket(ctx); err != nil {
			return err
		}
		b.res.Groups = append(b.res.Groups, groupRun{Size: label, Group: g[0].group, Commit: b.res.Commit, Started: started, Finished: time.Now().UTC(), Rounds: done})
		if err := b.res.save(filepath.Join(b.cfg.work, "results.json")); err != nil {
			return err
		}
	}
	return nil
}

// runRounds runs the modes of group g in rounds (see roundOrder): rounds
// of them, then more, up to most, while a mode compared with the baseline
// has fewer than minQuietRounds quiet rounds. It returns the rounds run.
func (b *bench) runRounds(ctx context.Context, etcd *etcdServer, g []mode, label string, rounds, most int, sources map[string]preparedBackup) (int, error) {
	run := 1
	for ; run <= most; run++ {
		if run > rounds && !b.needsQuietRounds(label, g) {
			break
		}
		for i, m := range roundModes(g, run, b.cfg.refRuns) {
			s, err := b.runMode(ctx, etcd, m, label, run, sources[m.source])
			if err != nil {
				return 0, err
			}
			s.Seq = i + 1
			b.res.Samples = append(b.res.Samples, s)
			progress("%s run %d/%d %-16s %7.2f s  rss %4d MiB (anon %d)  stored %s  cpu %.1f s (etcd %.1f, minio %.1f, others %.2f cores)  load %.2f  go alloc %s in %d GCs",
				label, run, rounds, m.name, s.Wall, s.PeakRSS>>20, s.PeakAnon>>20, formatBytes(s.Stored), s.CPU, s.EtcdCPU, s.MinIOCPU, s.OtherCores, s.Load1, formatBytes(int64(s.Allocated)), s.GCs)
			// Partial results survive an interrupted run.
			_ = b.res.save(filepath.Join(b.cfg.work, "results.json"))
		}
	}
	return run - 1, nil
}

// needsQuietRounds reports whether a mode of g that is compared with its
// baseline has fewer than minQuietRounds quiet rounds on size, in the
// groups the Targets judge (the loopback backups and restores).
func (b *bench) needsQuietRounds(size string, g []mode) bool {
	if g[0].group != groupBackup && g[0].group != groupRestore {
		// No wall-time verdict rests on the other groups.
		return false
	}
	var base string
	for _, m := range g {
		if !m.reference {
			base = m.name
			break
		}
	}
	for _, rw := range b.res.summarize(size) {
		if rw.Mode.Group == g[0].group && !rw.Mode.Reference && rw.Mode.Name != base && rw.Judged.Quiet < minQuietRounds {
			return true
		}
	}
	return false
}

// roundModes returns the modes of round run of group g in their order
// (roundOrder), without the references after round refRuns. The
// references come last, so the others keep their places.
func roundModes(g []mode, run, refRuns int) []mode {
	out := roundOrder(g, run)
	if run > refRuns {
		out = slices.DeleteFunc(out, func(m mode) bool { return m.reference })
	}
	return out
}

// roundOrder returns the order of round run of group g: every mode
// compared with the baseline (its first mode that is not a reference)
// runs right next to a run of the baseline, one mode before and one after
// each baseline run, so that a mode and the baseline it is divided by see
// the same load; the references follow. A mode runs before the baseline
// in one round and after it in the next, and the modes rotate by one
// each round, so that no mode always follows the same neighbour.
func roundOrder(g []mode, run int) []mode {
	var base *mode
	var compared, refs []mode
	side := map[string]bool{} // runs before the baseline
	for i, m := range g {
		switch {
		case m.reference:
			refs = append(refs, m)
		case base == nil:
			base = &g[i]
		default:
			side[m.name] = (len(compared)+run)%2 == 1
			compared = append(compared, m)
		}
	}
	rotate := func(ms []mode) []mode {
		if len(ms) == 0 {
			return ms
		}
		k := (run - 1) % len(ms)
		return append(slices.Clone(ms[k:]), ms[:k]...)
	}
	var before, after []mode
	for _, m := range rotate(compared) {
		if side[m.name] {
			before = append(before, m)
		} else {
			after = append(after, m)
		}
	}
	var out []mode
	if base != nil && len(compared) == 0 {
		out = append(out, *base)
	}
	for i := range max(len(before), len(after)) {
		if i < len(before) {
			out = append(out, before[i])
		}
		out = append(out, *base)
		if i < len(after) {
			out = append(out, after[i])
		}
	}
	return append(out, rotate(refs)...)
}

// newResults returns empty results of a run starting now on this machine.
func newResults() *results {
	return &results{
		Machine: machine{
			CPUs:        runtime.NumCPU(),
			CPUModel:    cpuModel(),
			MemoryBytes: memTotal(),
			GoVersion:   runtime.Version(),
			OS:          runtime.GOOS + "/" + runtime.GOARCH,
			EtcdVersion: version.Version,
			MinIO:       minioVersion(minioBinary()),
			Library:     backup.LibraryVersion(),
		},
		Started: time.Now().UTC(),
		Command: "make bench",
	}
}

// saveSection loads the results at path (new ones when there are none),
// lets set fill in its section, saves them and renders the report and
// chart again: the continuous-backup subcommands add their figures to the
// run's results this way.
func saveSection(path, out, chart string, set func(*results)) error {
	r, err := loadResults(path)
	if errors.Is(err, os.ErrNotExist) {
		r, err = newResults(), nil
		r.Finished = r.Started
	}
	if err != nil {
		return err
	}
	set(r)
	if err := r.save(path); err != nil {
		return err
	}
	return writeOutputs(r, out, chart)
}

// benchFlags returns args without -cli and its value, which make bench
// sets itself, and without -resume.
func benchFlags(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-cli" || a == "--cli":
			i++
		case strings.HasPrefix(a, "-cli=") || strings.HasPrefix(a, "--cli="):
		case strings.TrimLeft(a, "-") == "resume" || strings.HasPrefix(strings.TrimLeft(a, "-"), "resume="):
		default:
			out = append(out, a)
		}
	}
	return out
}

// groupModes splits modes into their groups, each in the order of modes.
func groupModes(ms []mode) [][]mode {
	var out [][]mode
	at := map[string]int{}
	for _, m := range ms {
		i, ok := at[m.group]
		if !ok {
			i = len(out)
			at[m.group] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], m)
	}
	return out
}

// prepareSources takes, untimed, one backup with each backup mode that a
// restore mode of group names as its source, and leaves it in the bucket
// for the group's runs.
func (b *bench) prepareSources(ctx context.Context, etcd *etcdServer, group []mode, size string) (map[string]preparedBackup, error) {
	out := map[string]preparedBackup{}
	for _, m := range group {
		if _, ok := out[m.source]; ok || m.source == "" {
			continue
		}
		src, ok := findMode(m.source)
		if !ok || src.group != groupBackup {
			return nil, fmt.Errorf("mode %s reads the backup of %q, which is not a backup mode", m.name, m.source)
		}
		res, _, err := b.child(ctx, src, b.env(etcd, "src-"+src.name, ""))
		if err != nil {
			return nil, err
		}
		if res.ID == "" || res.Key == "" {
			return nil, fmt.Errorf("mode %s reported no backup to restore", src.name)
		}
		out[src.name] = preparedBackup{ID: res.ID, Key: res.Key}
		progress("%s prepared %s for the modes that read it: %s, %s stored", size, src.name, res.Key, formatBytes(res.Stored))
	}
	syscall.Sync()
	return out, nil
}

// env returns the environment of a mode's run.
func (b *bench) env(etcd *etcdServer, name, profile string) modeEnv {
	return modeEnv{
		Etcd:     etcd.endpoint,
		S3:       b.minio.addr,
		Access:   b.minio.access,
		Secret:   b.minio.secret,
		Bucket:   benchBucket,
		TmpDir:   filepath.Join(b.run, "tmp"),
		Name:     name,
		PartSize: twoStepPartSize,
		Trace:    b.cfg.trace,
		Profile:  profile,
		Identity: b.identity,
		CLI:      b.cfg.cli,
		To:       b.minioTo.address(),
	}
}

// leanBinary returns the path of the backup modes' binary, next to self
// and named after it with "-lean": this package built with the benchlean
// tag (lean.go), as make bench builds it. Backup modes run in it, so that
// their peak RSS is not that of the bench's own etcd server, generator and
// report code, which every process of the bench binary maps and
// initialises: about 24 MiB before a mode does anything, against about 12
// MiB. Restore modes run in the bench binary, whose etcd server packages
// they link anyway. It fails when a backup mode is to run and the binary
// is missing.
func leanBinary(self string, modes []mode) (string, error) {
	lean := self + "-lean"
	if !slices.ContainsFunc(modes, func(m mode) bool { return isBackupGroup(m.group) || m.group == groupCopy || m.source != "" }) {
		return lean, nil
	}
	if _, err := os.Stat(lean); err != nil {
		return "", fmt.Errorf("backup modes run in %s, built with: go build -tags benchlean -o %s ./internal/bench (make bench builds it): %w", lean, lean, err)
	}
	return lean, nil
}

// child runs one mode in a child process and returns its result and
// resource usage.
func (b *bench) child(ctx context.Context, m mode, env modeEnv) (modeResult, *syscall.Rusage, error) {
	in, err := json.Marshal(env)
	if err != nil {
		return modeResult{}, nil, err
	}
	var out, errOut bytes.Buffer
	bin := b.self
	if isBackupGroup(m.group) || m.group == groupCopy {
		bin = b.lean
	}
	cmd := exec.CommandContext(ctx, bin, "mode", "-mode", m.name)
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stdout = &out
	cmd.Stderr = io.MultiWriter(&errOut, os.Stderr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		return modeResult{}, nil, fmt.Errorf("%w: %s (%s): %w: %s", errModeFailed, m.name, env.Name, err, strings.TrimSpace(errOut.String()))
	}
	var res modeResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return modeResult{}, nil, fmt.Errorf("mode %s: read result: %w", m.name, err)
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return modeResult{}, nil, errors.New("no rusage for the mode's process")
	}
	return res, ru, nil
}

// runMode runs one mode in a child process and measures it. A backup
// mode's object is checked in the store and removed; restore modes leave
// the bucket alone.
func (b *bench) runMode(ctx context.Context, etcd *etcdServer, m mode, size string, run int, src preparedBackup) (sample, error) {
	var profile string
	if b.cfg.profile != "" {
		abs, err := filepath.Abs(filepath.Join(b.cfg.profile, fmt.Sprintf("%s-%s-r%d.pprof", strings.ReplaceAll(size, " ", ""), m.name, run)))
		if err != nil {
			return sample{}, err
		}
		profile = abs
	}
	env := b.env(etcd, fmt.Sprintf("r%d-%s", run, m.name), profile)
	env.Source = src
	if m.store != "" {
		p := b.stores[m.store]
		env.S3, env.CAFile = p.addr, p.caFile
	}

	s := sample{Size: size, Mode: m.name, Run: run, Load1: loadAverage()}
	minioCPU := b.minio.cpuSeconds
	if m.group == groupCopy {
		// A copy's second server is part of its work, not others' load.
		minioCPU = func() float64 { return b.minio.cpuSeconds() + b.minioTo.cpuSeconds() }
	}
	etcd0, minio0, busy0 := etcd.cpuSeconds(), minioCPU(), busySeconds()
	self0, _ := procCPUSeconds(os.Getpid())
	start := time.Now()
	res, ru, err := b.child(ctx, m, env)
	elapsed := time.Since(start).Seconds()
	etcd1, minio1, busy1 := etcd.cpuSeconds(), minioCPU(), busySeconds()
	self1, _ := procCPUSeconds(os.Getpid())
	if err != nil {
		return sample{}, fmt.Errorf("%s on %s, run %d: %w", m.name, size, run, err)
	}
	s.Wall, s.Raw, s.Stored, s.SnapshotOpen = res.Wall, res.Raw, res.Stored, res.SnapshotOpen
	// The peak RSS is the child's own VmHWM, not ru_maxrss: Linux carries
	// the high-water mark of the memory the process had before execve into
	// ru_maxrss, and os/exec starts the child sharing this process' memory,
	// so ru_maxrss would be at least the bench's own RSS.
	s.PeakRSS, s.PeakAnon, s.SampledPeak = res.HWM, res.AnonHWM, res.SampledHWM
	s.Allocated, s.GCs = res.Allocated, res.GCs
	s.CPU = (time.Duration(ru.Utime.Nano()) + time.Duration(ru.Stime.Nano())).Seconds()
	s.EtcdCPU, s.MinIOCPU = etcd1-etcd0, minio1-minio0
	if elapsed > 0 {
		others := (busy1 - busy0) - s.CPU - s.EtcdCPU - s.MinIOCPU - (self1 - self0)
		s.OtherCores = max(0, others/elapsed)
	}

	if isBackupGroup(m.group) {
		if res.Key != "" {
			sizes, err := b.minio.objectSizes(ctx)
			if err != nil {
				return sample{}, err
			}
			if got, ok := sizes[res.Key]; !ok || got != res.Stored {
				return sample{}, fmt.Errorf("mode %s: object %s has %d bytes in the store (found: %t), the mode reported %d", m.name, res.Key, got, ok, res.Stored)
			}
		}
		if err := b.minio.emptyBucket(ctx); err != nil {
			return sample{}, err
		}
	}
	if m.group == groupCopy {
		if err := b.checkCopy(ctx, m, res); err != nil {
			return sample{}, err
		}
	}
	// Write back what the run left dirty now, not during the next run.
	syscall.Sync()
	return s, nil
}

// warmUp reads a snapshot to the end untimed and returns its size.
func warmUp(ctx context.Context, etcd *etcdServer) (int64, error) {
	cli, err := etcd.client()
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return 0, fmt.Errorf("warm-up snapshot: %w", err)
	}
	defer rc.Close()
	n, err := io.Copy(io.Discard, rc)
	if err != nil {
		return 0, fmt.Errorf("warm-up snapshot: %w", err)
	}
	return n, nil
}

// runReport is the "report" subcommand: it renders the report and chart
// again from saved results.
func runReport(args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	in := fs.String("in", filepath.Join("bench-out", "results.json"), "saved results")
	out := fs.String("out", "BENCHMARKS.md", "report to write")
	chart := fs.String("chart", "BENCHMARKS.png", "chart to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	r, err := loadResults(*in)
	if err != nil {
		return err
	}
	return writeOutputs(r, *out, *chart)
}

func writeOutputs(r *results, out, chart string) error {
	rel, err := filepath.Rel(filepath.Dir(out), chart)
	if err != nil {
		rel = chart
	}
	if err := writeChart(r, chart); err != nil {
		return err
	}
	report, err := renderReport(r, filepath.ToSlash(rel))
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, []byte(report), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// minioVersion returns the module version the MinIO binary was built
// from: `go install` builds report no release in `minio --version`.
func minioVersion(bin string) string {
	if info, err := buildinfo.ReadFile(bin); err == nil && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Path + "@" + info.Main.Version
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(strings.TrimPrefix(line, "minio version "))
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// parseSize reads sizes like "256MiB", "1GiB" or "1073741824".
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}}
	mult := int64(1)
	num := s
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = v, u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q: want a positive number of bytes, KiB, MiB or GiB", s)
	}
	return int64(n * float64(mult)), nil
}

// formatBytes writes n in binary units with up to one decimal.
func formatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return trimZero(float64(n)/(1<<30)) + " GiB"
	case n >= 1<<20:
		return trimZero(float64(n)/(1<<20)) + " MiB"
	case n >= 1<<10:
		return trimZero(float64(n)/(1<<10)) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}

func trimZero(f float64) string {
	return strings.TrimSuffix(strconv.FormatFloat(f, 'f', 1, 64), ".0")
}
