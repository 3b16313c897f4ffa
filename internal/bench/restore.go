//go:build !benchlean

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"filippo.io/age"
	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/restore"
)

// The member every restore mode restores: one member of a new cluster, as
// `etcdutl snapshot restore` makes it with its defaults.
const (
	restoreMember   = "bench"
	restorePeerURL  = "http://127.0.0.1:2380"
	restoreInitial  = restoreMember + "=" + restorePeerURL
	restoreClusterT = "etcd-cluster"
)

// restoreModes are the modes of the restore group. They link etcd's
// server packages (etcdutl, the restore's replay) and run in the bench
// binary.
var restoreModes = append([]mode{
	{name: "download-restore", short: "(f) download, etcdutl restore", label: "(f) download with minio-go `FGetObject` (what `mc cp` does), then etcd's restore as `etcdutl snapshot restore` runs it, in one process", group: "restore", source: "stream", run: runDownloadRestore},
	{name: "restore", short: "(g) restore", label: "(g) etcdbackup `Restorer.Restore`, the same object as (f)", group: "restore", source: "stream", run: runRestore},
	{name: "restore-zstd-age", short: "(h) restore zstd+age", label: "(h) etcdbackup `Restorer.Restore` of a zstd + age backup", group: "restore", source: "stream-zstd-age", run: runRestore},
	{name: "download", short: "download only", label: "(ref) download of (f)'s object to a file only", group: "restore", reference: true, source: "stream", run: runDownload},
	{name: "import-keys", short: "keys-json import", label: "(ref) etcdbackup `Importer` with its defaults, in the bench binary, of the export-keys-mem object into an empty etcd (a process of its own), under a 32 MiB memory limit", group: "restore", reference: true, source: "export-keys-mem", run: runImportKeys},
	{name: "import-keys-zip", short: "keys zip import", label: "(ref) the same `Importer` of the export-keys-zip-mem object (a keys zip) into an empty etcd, under the same memory limit", group: "restore", reference: true, source: "export-keys-zip-mem", run: runImportKeys},
	{name: "cli-import", short: "CLI import", label: "(ref) `etcdbackup import` as shipped (`make release`), a process of its own, at its defaults, of the export-keys-mem object into an empty etcd (a process of its own); wall time includes the process' start", group: "restore", reference: true, source: "export-keys-mem", run: runCLIImport},
}, remoteRestoreModes()...)

// remoteRestoreModes are, for each remote store, a restore group of its
// own: (f) through the store (its baseline), (g) of the same object, and
// (g) of a zstd backup taken within the CLI's budget, what the CLI stores.
func remoteRestoreModes() []mode {
	var out []mode
	for _, st := range remoteStores {
		g := groupRestore + "-" + st.name
		out = append(out,
			mode{name: "download-restore-" + st.name, short: "(f) " + st.name, label: "(f) download from " + st.describe() + ", then etcd's restore as `etcdutl snapshot restore` runs it, in one process", group: g, store: st.name, source: "stream", run: runDownloadRestore},
			mode{name: "restore-" + st.name, short: "(g) " + st.name, label: "(g) etcdbackup `Restorer.Restore` of (f)'s object from " + st.describe(), group: g, store: st.name, source: "stream", run: runRestore},
			mode{name: "restore-zstd-" + st.name, short: "(g') zstd " + st.name, label: "(g') etcdbackup `Restorer.Restore` of the (c') zstd backup from " + st.describe(), group: g, store: st.name, source: "stream-zstd-mem", run: runRestore},
		)
	}
	return out
}

// runDownloadRestore does what an operator does by hand: download the
// object with `mc cp` (minio-go's FGetObject: a ".part.minio" file renamed
// at the end) and restore it with `etcdutl snapshot restore`, which checks
// the snapshot's sha256 trailer and then builds the data directory.
func runDownloadRestore(ctx context.Context, env modeEnv) (modeResult, error) {
	work, err := os.MkdirTemp(env.TmpDir, env.Name+"-")
	if err != nil {
		return modeResult{}, err
	}
	defer os.RemoveAll(work)
	start := time.Now()
	size, err := download(ctx, env, filepath.Join(work, "snapshot.db"))
	if err != nil {
		return modeResult{}, err
	}
	err = snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        filepath.Join(work, "snapshot.db"),
		Name:                restoreMember,
		OutputDataDir:       filepath.Join(work, "data"),
		PeerURLs:            []string{restorePeerURL},
		InitialCluster:      restoreInitial,
		InitialClusterToken: restoreClusterT,
	})
	if err != nil {
		return modeResult{}, fmt.Errorf("etcdutl snapshot restore: %w", err)
	}
	wall := time.Since(start)
	if err := checkDataDir(filepath.Join(work, "data")); err != nil {
		return modeResult{}, err
	}
	return modeResult{Wall: wall.Seconds(), Raw: size, Stored: size}, nil
}

// runDownload only downloads the object (f) restores: the floor of any
// restore from this MinIO.
func runDownload(ctx context.Context, env modeEnv) (modeResult, error) {
	work, err := os.MkdirTemp(env.TmpDir, env.Name+"-")
	if err != nil {
		return modeResult{}, err
	}
	defer os.RemoveAll(work)
	start := time.Now()
	size, err := download(ctx, env, filepath.Join(work, "snapshot.db"))
	if err != nil {
		return modeResult{}, err
	}
	return modeResult{Wall: time.Since(start).Seconds(), Raw: size, Stored: size}, nil
}

func download(ctx context.Context, env modeEnv, path string) (int64, error) {
	c, err := env.minioClient()
	if err != nil {
		return 0, err
	}
	if err := c.FGetObject(ctx, env.Bucket, env.Source.Key, path, minio.GetObjectOptions{}); err != nil {
		return 0, fmt.Errorf("download %s: %w", env.Source.Key, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// runRestore restores the mode's source backup with restore.Restorer:
// find it by ID (listing the cluster's folder and reading its manifest),
// then fetch, decrypt, decompress and check it against the manifest's
// sha256 and etcd's trailer while it streams to a staging file, and
// restore the data directory with etcd's own restore.
func runRestore(ctx context.Context, env modeEnv) (modeResult, error) {
	work, err := os.MkdirTemp(env.TmpDir, env.Name+"-")
	if err != nil {
		return modeResult{}, err
	}
	defer os.RemoveAll(work)
	bucket, err := env.bucket()
	if err != nil {
		return modeResult{}, err
	}
	r := &restore.Restorer{Logger: traceLoggerIf(env.Trace)}
	if env.Identity != "" {
		id, err := age.ParseX25519Identity(env.Identity)
		if err != nil {
			return modeResult{}, err
		}
		r.Identities = []age.Identity{id}
	}
	var fetched restore.Event
	r.Observer = restore.ObserverFunc(func(e restore.Event) {
		if e.Kind == restore.Fetched {
			fetched = e
		}
		if env.Trace {
			fmt.Fprintf(os.Stderr, "  %s stored=%d raw=%d\n", e.Kind, e.StoredBytes, e.RawBytes)
		}
	})
	start := time.Now()
	b, err := restore.Find(ctx, []restore.Source{{Name: "minio", Catalog: bucket}}, restore.Query{Cluster: "bench", ID: env.Source.ID})
	if err != nil {
		return modeResult{}, err
	}
	dir := filepath.Join(work, "data")
	if _, err := r.Restore(ctx, b, restore.Member{Name: restoreMember, DataDir: dir, PeerURLs: []string{restorePeerURL}}); err != nil {
		return modeResult{}, err
	}
	wall := time.Since(start)
	if err := checkDataDir(dir); err != nil {
		return modeResult{}, err
	}
	return modeResult{Wall: wall.Seconds(), Raw: fetched.RawBytes, Stored: fetched.StoredBytes}, nil
}

// checkDataDir checks that a restore left a member's database where etcd
// looks for it.
func checkDataDir(dir string) error {
	fi, err := os.Stat(filepath.Join(dir, "member", "snap", "db"))
	if err != nil {
		return fmt.Errorf("restored data directory: %w", err)
	}
	if fi.Size() == 0 {
		return fmt.Errorf("restored data directory %s has an empty database", dir)
	}
	return nil
}

// runImportKeys imports the export its source mode prepared into an empty
// etcd, a process of its own started for the run: the fetch and check of
// the object and the import, as restore.Importer does them, under the
// memory limit the CLI's import sets.
func runImportKeys(ctx context.Context, env modeEnv) (modeResult, error) {
	limitMemory(32 << 20) // as the CLI's import does
	bucket, err := env.bucket()
	if err != nil {
		return modeResult{}, err
	}
	self, err := os.Executable()
	if err != nil {
		return modeResult{}, err
	}
	dir, err := os.MkdirTemp(env.TmpDir, "import-")
	if err != nil {
		return modeResult{}, err
	}
	defer os.RemoveAll(dir)
	target, err := startEtcd(ctx, self, filepath.Join(dir, "etcd"), filepath.Join(dir, "etcd.log"), false)
	if err != nil {
		return modeResult{}, err
	}
	defer target.stop(time.Minute)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{target.endpoint}, Logger: zap.NewNop()})
	if err != nil {
		return modeResult{}, err
	}
	defer cli.Close()
	b, err := restore.Find(ctx, []restore.Source{{Name: "minio", Catalog: bucket}},
		restore.Query{Cluster: "bench", ID: env.Source.ID, Kind: backup.KindKeysJSON})
	if err != nil {
		return modeResult{}, err
	}
	start := time.Now()
	path := filepath.Join(dir, "keys") // keys-json or a keys zip
	fetched, err := (&restore.Restorer{}).Fetch(ctx, b, path)
	if err != nil {
		return modeResult{}, err
	}
	if _, err := (&restore.Importer{Client: cli, TempDir: dir}).ImportFile(ctx, path); err != nil {
		return modeResult{}, err
	}
	return modeResult{Wall: time.Since(start).Seconds(), Raw: fetched.Raw.Size, Stored: fetched.Stored.Size}, nil
}

// runCLIImport is `etcdbackup import` of env.Source into an empty etcd
// started for the run, at the CLI's defaults.
func runCLIImport(ctx context.Context, env modeEnv) (modeResult, error) {
	self, err := os.Executable()
	if err != nil {
		return modeResult{}, err
	}
	dir, err := os.MkdirTemp(env.TmpDir, "cli-import-")
	if err != nil {
		return modeResult{}, err
	}
	defer os.RemoveAll(dir)
	target, err := startEtcd(ctx, self, filepath.Join(dir, "etcd"), filepath.Join(dir, "etcd.log"), false)
	if err != nil {
		return modeResult{}, err
	}
	defer target.stop(time.Minute)
	res, _, err := runCLI(ctx, env, "import", "--endpoints="+target.endpoint, "--destination="+cliDestination(env),
		"--cluster=bench", "--backup="+env.Source.ID, "--temp-dir="+dir, "--quiet")
	if err != nil {
		return modeResult{}, err
	}
	m, err := findManifest(ctx, env, env.Source.ID)
	if err != nil {
		return modeResult{}, err
	}
	res.Raw, res.Stored = m.Raw.Size, m.Stored.Size
	return res, nil
}
