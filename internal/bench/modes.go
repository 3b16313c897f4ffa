package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"filippo.io/age"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	"go.uber.org/zap"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// A mode is one way of doing the job being measured. Each run of a mode
// is a child process of its own (the "mode" subcommand), so that its peak
// RSS and CPU time are its alone: etcd and MinIO run in other processes.
//
// To add a mode, append it to modes. Modes of one group are compared with
// the group's baseline, its first mode that is not a reference: the backup
// group with the two-step approach of cron-job tools, the restore group
// with download-then-`etcdutl snapshot restore`. Restore modes read a
// backup prepared once per etcd size by the backup mode their source
// names (see prepareSources); they leave the bucket as it is.
type mode struct {
	// name identifies the mode on the command line and in results.
	name string
	// label describes the mode in the report; short in the chart's legend.
	label, short string
	// group is the set of modes compared with one another.
	group string
	// reference marks a mode that is not a way of doing the job but a
	// floor to read the others against; targets ignore it.
	reference bool
	// source, for a restore mode, is the backup mode whose backup it
	// reads.
	source string
	// store, when set, names the remote store (remoteStores) the mode
	// runs against instead of the loopback MinIO.
	store string
	// run does the job once and reports what it did.
	run func(ctx context.Context, env modeEnv) (modeResult, error)
}

// The groups of modes.
const (
	groupBackup  = "backup"
	groupRestore = "restore"
	// groupCopy copies a stored backup between two MinIO servers.
	groupCopy = "copy"
)

// modes lists every mode, in the order of the report. The first mode of a
// group is its baseline.
var modes = slices.Concat(backupModes, remoteBackupModes(), restoreModes, copyModes)

// remoteStore is MinIO as a distant store looks to a client: over TLS, at
// a round-trip time (see startStores).
type remoteStore struct {
	name string
	rtt  time.Duration
}

// remoteStores are the stores the remote modes run against.
var remoteStores = []remoteStore{
	{name: "tls", rtt: 0},
	{name: "tls-50ms", rtt: 50 * time.Millisecond},
	{name: "tls-100ms", rtt: 100 * time.Millisecond},
}

func findStore(name string) (remoteStore, bool) {
	for _, st := range remoteStores {
		if st.name == name {
			return st, true
		}
	}
	return remoteStore{}, false
}

// describe says what st is, for labels.
func (st remoteStore) describe() string {
	if st.rtt == 0 {
		return "MinIO over TLS, no added RTT"
	}
	return fmt.Sprintf("MinIO over TLS at %v RTT", st.rtt)
}

// remoteBackupModes are, for each remote store, a backup group of its own:
// two-step through the store (its baseline), the CLI at its defaults and
// with --memory=0, and the CLI's keys-json export as a reference.
func remoteBackupModes() []mode {
	var out []mode
	for _, st := range remoteStores {
		g := groupBackup + "-" + st.name
		out = append(out,
			mode{name: "two-step-" + st.name, short: "(a) two-step, " + st.name, label: "(a) two-step, uploading to " + st.describe(), group: g, store: st.name, run: runTwoStep},
			mode{name: "cli-save-" + st.name, short: "CLI save, " + st.name, label: "`etcdbackup save` as shipped at its defaults (zstd, `--memory=32MiB`), to " + st.describe() + "; wall time includes the process' start", group: g, store: st.name, run: runCLISave},
			mode{name: "cli-save-mem0-" + st.name, short: "CLI save --memory=0, " + st.name, label: "`etcdbackup save --memory=0` (the library's defaults: 8 MiB parts, four in flight), to " + st.describe() + "; wall time includes the process' start", group: g, store: st.name, run: runCLISaveMem0},
			mode{name: "cli-export-" + st.name, short: "CLI export, " + st.name, label: "(ref) `etcdbackup export` of every key at its defaults, to " + st.describe() + "; wall time includes the process' start", group: g, store: st.name, reference: true, run: runCLIExport},
		)
	}
	return out
}

// isBackupGroup and isRestoreGroup tell the kind of a group: the loopback
// group or a remote store's.
func isBackupGroup(g string) bool { return g == groupBackup || strings.HasPrefix(g, groupBackup+"-") }
func isRestoreGroup(g string) bool {
	return g == groupRestore || strings.HasPrefix(g, groupRestore+"-")
}

// backupModes are the modes of the backup group. They run in the backup
// modes' binary (see leanBinary).
var backupModes = slices.Concat([]mode{
	{name: "two-step", short: "(a) two-step", label: "(a) two-step: what `etcdctl snapshot save` to a file, then `mc cp` do, in one process (etcd's `snapshot.SaveWithVersion`, then minio-go `FPutObject`)", group: "backup", run: runTwoStep},
	{name: "stream", short: "(b) streaming", label: "(b) etcdbackup streaming, no compression", group: "backup", run: runPipeline(backup.None, false, false)},
	{name: "stream-zstd", short: "(c) streaming zstd", label: "(c) etcdbackup streaming, zstd", group: "backup", run: runPipeline(backup.Zstd, false, false)},
	{name: "stream-zstd-age", short: "(d) streaming zstd+age", label: "(d) etcdbackup streaming, zstd + age", group: "backup", run: runPipeline(backup.Zstd, true, false)},
	{name: "spool-zstd", short: "(e) spool zstd", label: "(e) etcdbackup spool mode, zstd", group: "backup", run: runPipeline(backup.Zstd, false, true)},
	{name: "stream-zstd-mem", short: "(c') zstd, 32 MiB budget", label: "(c') etcdbackup streaming, zstd, in the lean binary within a 32 MiB budget split as the CLI's `--memory` splits it: 8 MiB parts, 2 in flight; two zstd encoders, 2 MiB windows; the Go runtime's memory limit `backup.MemoryLimit` gives (the CLI itself: the CLI save row)", group: "backup", run: runPipelineWithin(backup.Zstd, false, false, 32<<20)},
	{name: "snapshot-read", short: "snapshot read only", label: "(ref) snapshot read and trailer check only, to /dev/null", group: "backup", reference: true, run: runSnapshotRead},
	{name: "idle", short: "idle process", label: "(ref) idle child: the backup modes' binary doing nothing", group: "backup", reference: true, run: runIdle},
	{name: "export-keys", short: "keys-json export", label: "(ref) etcdbackup keys-json export of every key, zstd, with the library's defaults: a logical backup, read against (c)", group: "backup", reference: true, run: runExportKeys},
	{name: "export-keys-mem", short: "keys-json export, 32 MiB budget", label: "(ref) the same export in the lean binary within a 32 MiB budget and memory limit, as (c'), and the CLI's gRPC windows (`backup.ExportDialOptions`) (the CLI itself: the CLI export row)", group: "backup", reference: true, run: runExportKeysMem},
	{name: "export-keys-zip-mem", short: "keys zip export, 32 MiB budget", label: "(ref) the same export as a keys zip (`export --type=keys`), in the lean binary within the same budget and memory limit: its index and directory spooled to a temporary file", group: "backup", reference: true, run: runExportKeysZipMem},
	{name: "cli-save", short: "CLI save", label: "(ref) `etcdbackup save` as shipped (`make release`), a process of its own, at its defaults (zstd, `--memory=32MiB`); wall time includes the process' start", group: "backup", reference: true, run: runCLISave},
	{name: "cli-idle", short: "CLI idle", label: "(ref) `etcdbackup version` as shipped (`make release`): the CLI's floor, its peak RSS before doing anything", group: "backup", reference: true, run: runCLIIdle},
	{name: "cli-export", short: "CLI export", label: "(ref) `etcdbackup export` of every key as shipped (`make release`), a process of its own, at its defaults; wall time includes the process' start", group: "backup", reference: true, run: runCLIExport},
}, cpuCostModes)

func findMode(name string) (mode, bool) {
	for _, m := range modes {
		if m.name == name {
			return m, true
		}
	}
	return mode{}, false
}

// modeEnv is what a mode runs against. The parent hands it to the child
// as JSON on the child's standard input, which keeps credentials out of
// the process list.
type modeEnv struct {
	Etcd     string // client URL of the etcd member
	S3       string // host:port of MinIO
	Access   string
	Secret   string
	Bucket   string
	TmpDir   string // for the two-step file and the spool
	Name     string // unique per run; a DNS label
	PartSize int64  // two-step upload's part size
	// Trace makes the mode log what it does to its standard error.
	Trace bool
	// Profile, when set, is the file the mode writes its CPU profile to.
	Profile string
	// Identity is the age identity (AGE-SECRET-KEY-1...) the encrypting
	// backup modes encrypt to and the restore modes decrypt with.
	Identity string
	// Source is the backup a restore mode reads.
	Source preparedBackup
	// CLI is the path of the etcdbackup command the CLI modes run.
	CLI string `json:",omitempty"`
	// CAFile, when set, is the PEM file of the authority of S3's
	// certificate: S3 speaks HTTPS.
	CAFile string `json:",omitempty"`
	// To is host:port of the second MinIO server the copy modes copy to,
	// with the same credentials and bucket.
	To string `json:",omitempty"`
}

// minioClient returns a minio-go client of env's S3 (as `mc` makes one),
// over HTTPS when env has a CA.
func (env modeEnv) minioClient() (*minio.Client, error) {
	o := &minio.Options{
		Creds:        credentials.NewStaticV4(env.Access, env.Secret, ""),
		Region:       "us-east-1",
		BucketLookup: minio.BucketLookupPath,
	}
	if env.CAFile != "" {
		tr, err := minio.DefaultTransport(true)
		if err != nil {
			return nil, err
		}
		if err := s3.TrustCAs(tr, nil, env.CAFile); err != nil {
			return nil, err
		}
		o.Secure, o.Transport = true, tr
	}
	return minio.New(env.S3, o)
}

// preparedBackup is a backup a restore mode reads: its ID and the key of
// its data object.
type preparedBackup struct {
	ID, Key string
}

// modeResult is what a mode reports.
type modeResult struct {
	// Wall is the time the job took, in seconds, timed inside the child.
	Wall float64
	// Raw is the snapshot's size as etcd sent it, Stored the stored
	// object's.
	Raw, Stored int64
	// Key is the stored object's key; the parent checks its size. ID is
	// the backup's ID, for the modes that take one.
	Key string `json:",omitempty"`
	ID  string `json:",omitempty"`
	// SnapshotOpen is how long etcd's snapshot stream (and so its read
	// transaction) was open, in seconds.
	SnapshotOpen float64
	// HWM is the child's VmHWM at the end, in bytes. AnonHWM is the
	// highest RssAnon seen by sampling every anonSampleEvery: its
	// anonymous memory, without the file pages it maps.
	HWM, AnonHWM int64
	// Allocated is the bytes the Go heap allocated in all (garbage
	// included) and GCs the number of collections: how hard the mode
	// works the garbage collector.
	Allocated uint64
	GCs       uint32
	// External is set by a mode that measured another process (the
	// CLI's): HWM and AnonHWM are that process', and Allocated and GCs
	// are not measured.
	External bool `json:",omitempty"`
	// SampledHWM says HWM is the other process' VmHWM as last sampled
	// before it ended, not its ru_maxrss (see runCLI).
	SampledHWM bool `json:",omitempty"`
}

// runModeChild is the "mode" subcommand: it reads a modeEnv on stdin, runs
// the named mode once and writes a modeResult as JSON on stdout.
func runModeChild(args []string) error {
	fs := flag.NewFlagSet("mode", flag.ContinueOnError)
	name := fs.String("mode", "", "mode to run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	m, ok := findMode(*name)
	if !ok {
		return fmt.Errorf("unknown mode %q", *name)
	}
	var env modeEnv
	if err := json.NewDecoder(os.Stdin).Decode(&env); err != nil {
		return fmt.Errorf("read mode environment: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if env.Profile != "" {
		f, err := os.Create(env.Profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	anon := sampleAnon(anonSampleEvery)
	res, err := m.run(ctx, env)
	ownAnon := anon()
	if env.Profile != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return fmt.Errorf("mode %s: %w", m.name, err)
	}
	if !res.External {
		res.HWM, res.AnonHWM = selfHWM(), ownAnon
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		res.Allocated, res.GCs = ms.TotalAlloc, ms.NumGC
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// runTwoStep does what cron-job backups do: `etcdctl snapshot save` (which
// is snapshot.SaveWithVersion: write a .part file, fsync, rename), then
// `mc cp` of the file, which is a minio-go upload of a file of known size
// in 16 MiB parts, four at a time.
func runTwoStep(ctx context.Context, env modeEnv) (modeResult, error) {
	path := filepath.Join(env.TmpDir, env.Name+".db")
	defer os.Remove(path)
	start := time.Now()
	if _, err := snapshot.SaveWithVersion(ctx, zap.NewNop(), clientv3.Config{Endpoints: []string{env.Etcd}, DialTimeout: 10 * time.Second}, path); err != nil {
		return modeResult{}, fmt.Errorf("save snapshot: %w", err)
	}
	saved := time.Since(start)
	c, err := env.minioClient()
	if err != nil {
		return modeResult{}, err
	}
	key := "two-step/" + env.Name + ".db"
	info, err := c.FPutObject(ctx, env.Bucket, key, path, minio.PutObjectOptions{PartSize: uint64(env.PartSize), ContentType: "application/octet-stream"})
	if err != nil {
		return modeResult{}, fmt.Errorf("upload snapshot: %w", err)
	}
	return modeResult{Wall: time.Since(start).Seconds(), Raw: info.Size, Stored: info.Size, Key: key, SnapshotOpen: saved.Seconds()}, nil
}

// bucket opens the run's MinIO bucket through storage/s3 with the library's
// default options.
func (env modeEnv) bucket() (*s3.Bucket, error) {
	return env.bucketWithin(0)
}

// bucketWithin is bucket with part buffers of at most budget bytes
// (s3.PartsWithin); zero means the defaults.
func (env modeEnv) bucketWithin(budget int64) (*s3.Bucket, error) {
	var size int64
	var parts int
	if budget > 0 {
		size, parts = s3.PartsWithin(budget)
	}
	return s3.New(s3.Options{
		PartSize:      size,
		PartsInFlight: parts,
		Endpoint:      env.S3,
		Bucket:        env.Bucket,
		Region:        "us-east-1",
		Insecure:      env.CAFile == "",
		CACertFile:    env.CAFile,
		BucketLookup:  s3.LookupPath,
		Credentials:   s3.StaticCredentials(env.Access, env.Secret, ""),
		Logger:        traceLoggerIf(env.Trace),
	})
}

// runPipeline returns a mode that takes one backup with backup.Pipeline to
// MinIO through storage/s3 with the library's default options.
func runPipeline(c backup.Compression, encrypt, spool bool) func(context.Context, modeEnv) (modeResult, error) {
	return runPipelineWithin(c, encrypt, spool, 0)
}

// runPipelineWithin is runPipeline within a memory budget, split as the
// CLI's --memory splits it: half for the part buffers, half for the
// compressor.
func runPipelineWithin(c backup.Compression, encrypt, spool bool, budget int64) func(context.Context, modeEnv) (modeResult, error) {
	return func(ctx context.Context, env modeEnv) (modeResult, error) {
		limitMemory(budget)
		bucket, err := env.bucketWithin(budget / 2)
		if err != nil {
			return modeResult{}, err
		}
		snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: []string{env.Etcd}})
		if err != nil {
			return modeResult{}, err
		}
		p := &backup.Pipeline{Snapshotter: snapshotter, Compression: c, MemoryBudget: budget / 2}
		if env.Trace {
			p.Logger = traceLogger()
			p.Observer = backup.ObserverFunc(func(e backup.Event) {
				fmt.Fprintf(os.Stderr, "  %6.2fs %s raw=%d stored=%d %s\n", e.Elapsed.Seconds(), e.Kind, e.RawBytes, e.StoredBytes, errString(e.Err))
			})
		}
		if encrypt {
			id, err := envIdentity(env)
			if err != nil {
				return modeResult{}, err
			}
			p.Encryption = backup.Encryption{Recipients: []string{id.Recipient().String()}}
		}
		if spool {
			p.Spool = &backup.Spool{Dir: env.TmpDir}
		}
		start := time.Now()
		res, err := p.Run(ctx, backup.Request{
			Cluster: "bench",
			Name:    env.Name,
			Targets: []backup.Target{{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: bucket}}},
		})
		wall := time.Since(start)
		if err != nil {
			return modeResult{}, err
		}
		m := res.Outcomes[0].Manifest
		return modeResult{
			Wall:         wall.Seconds(),
			Raw:          res.Raw.Size,
			Stored:       res.Stored.Size,
			Key:          backup.ClusterPrefix(m.Cluster) + m.DataKey,
			ID:           m.ID,
			SnapshotOpen: res.Snapshot.Finished.Sub(res.Snapshot.Started).Seconds(),
		}, nil
	}
}

// runSnapshotRead reads a verified snapshot to the end and discards it: the
// floor of any backup of this etcd from this process.
func runSnapshotRead(ctx context.Context, env modeEnv) (modeResult, error) {
	s, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: []string{env.Etcd}})
	if err != nil {
		return modeResult{}, err
	}
	start := time.Now()
	snap, err := s.Snapshot(ctx)
	if err != nil {
		return modeResult{}, err
	}
	defer snap.Close()
	n, err := io.Copy(io.Discard, snap)
	if err != nil {
		return modeResult{}, fmt.Errorf("read snapshot: %w", err)
	}
	wall := time.Since(start).Seconds()
	return modeResult{Wall: wall, Raw: n, SnapshotOpen: wall}, nil
}

// runIdle does nothing: its peak RSS is what the bench binary costs before
// any work (Go runtime, package initialisation, mapped code).
// limitMemory sets this mode process' soft memory limit as the CLI sets
// its own for a --memory budget (backup.MemoryLimit); 0 leaves it alone,
// as the CLI does for --memory=0.
func limitMemory(budget int64) {
	if budget > 0 {
		debug.SetMemoryLimit(backup.MemoryLimit(budget))
	}
}

func runIdle(context.Context, modeEnv) (modeResult, error) {
	return modeResult{}, nil
}

// selfHWM returns this process' peak resident set size (VmHWM).
func selfHWM() int64 { return selfStatus("VmHWM:") }

// resetHWM restarts this process' peak RSS (VmHWM) from its current RSS:
// writing 5 to clear_refs (Linux 4.0).
func resetHWM() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// selfStatus returns a size field of /proc/self/status in bytes, 0 if it
// cannot be read.
func selfStatus(field string) int64 { return procStatus("self", field) }

// procStatus returns a size field of /proc/PID/status in bytes, 0 if it
// cannot be read.
func procStatus(pid, field string) int64 {
	v, _ := procStatus2(pid, field, "")
	return v
}

// procStatus2 is procStatus of two fields ("" for none), read in one
// pass.
func procStatus2(pid, field1, field2 string) (int64, int64) {
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	var v [2]int64
	found := 0
	want := 1
	if field2 != "" {
		want = 2
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() && found < want {
		for i, field := range [2]string{field1, field2} {
			if field == "" {
				continue
			}
			if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
				v[i] = kb << 10
				found++
			}
		}
	}
	return v[0], v[1]
}

// anonSampleEvery is how often a mode's child samples its RssAnon.
const anonSampleEvery = 10 * time.Millisecond

// sampleAnon samples this process' RssAnon every interval until the
// returned function is called, which returns the highest value seen. Linux
// keeps a high-water mark of the whole resident set only (VmHWM), which
// counts the file pages a process maps: etcd's restore maps the database
// it writes with MAP_POPULATE, so the VmHWM of any restore includes the
// whole database, pages the kernel can drop and write back at will. The
// anonymous part is the memory the restore itself holds.
func sampleAnon(interval time.Duration) func() int64 { return sampleAnonIn("self", interval) }

// sampleAnonOf samples another process' RssAnon and VmHWM every
// interval until the returned function is called, which returns the
// highest of each seen while it ran: lower bounds, as neither is read
// after the process ends.
func sampleAnonOf(pid int, interval time.Duration) func() (anon, hwm int64) {
	return sampleStatus(strconv.Itoa(pid), interval, true)
}

// sampleAnonIn is sampleAnon of /proc/PID: RssAnon alone.
func sampleAnonIn(pid string, interval time.Duration) func() int64 {
	peaks := sampleStatus(pid, interval, false)
	return func() int64 { anon, _ := peaks(); return anon }
}

// sampleStatus samples RssAnon, and VmHWM when withHWM is set, of
// /proc/PID/status every interval until the returned function is called,
// which returns the highest of each seen (0 for VmHWM when not sampled).
func sampleStatus(pid string, interval time.Duration, withHWM bool) func() (anon, hwm int64) {
	done := make(chan struct{})
	result := make(chan [2]int64, 1)
	go func() {
		var peak [2]int64
		read := func() {
			if !withHWM {
				peak[0] = max(peak[0], procStatus(pid, "RssAnon:"))
				return
			}
			a, h := procStatus2(pid, "RssAnon:", "VmHWM:")
			peak[0], peak[1] = max(peak[0], a), max(peak[1], h)
		}
		read()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				read()
			case <-done:
				read()
				result <- peak
				return
			}
		}
	}()
	return func() (int64, int64) {
		close(done)
		p := <-result
		return p[0], p[1]
	}
}

// envIdentity returns the age identity of env, or a new one if it has
// none.
func envIdentity(env modeEnv) (*age.X25519Identity, error) {
	if env.Identity == "" {
		return age.GenerateX25519Identity()
	}
	return age.ParseX25519Identity(env.Identity)
}

// traceLogger logs everything to standard error, with the time since the
// process started.
func traceLogger() *slog.Logger {
	start := time.Now()
	h := slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.String("t", fmt.Sprintf("%.3fs", time.Since(start).Seconds()))
			}
			return a
		},
	})
	return slog.New(h)
}

func traceLoggerIf(on bool) *slog.Logger {
	if on {
		return traceLogger()
	}
	return nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// errModeFailed marks the failure of a mode's child process.
var errModeFailed = errors.New("mode failed")
