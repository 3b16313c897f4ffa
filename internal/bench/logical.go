package main

import (
	"context"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/restore"
)

// runExportKeys stores every key of the etcd as a keys-json logical backup
// through the pipeline, zstd: the export row, read against the snapshot
// backup of the same etcd.
func runExportKeys(ctx context.Context, env modeEnv) (modeResult, error) {
	return exportKeysWithin(ctx, env, 0)
}

// runExportKeysMem is runExportKeys within the CLI's default --memory,
// split as the CLI splits it.
func runExportKeysMem(ctx context.Context, env modeEnv) (modeResult, error) {
	return exportKeysWithin(ctx, env, 32<<20)
}

// exportKeysWithin is the export as the CLI runs it within a budget:
// its memory limit and a client with fixed gRPC windows. A budget of 0 is
// the library's defaults.
func exportKeysWithin(ctx context.Context, env modeEnv, budget int64) (modeResult, error) {
	limitMemory(budget)
	bucket, err := env.bucketWithin(budget / 2)
	if err != nil {
		return modeResult{}, err
	}
	cfg := clientv3.Config{Endpoints: []string{env.Etcd}, Logger: zap.NewNop()}
	if budget > 0 {
		cfg.DialOptions = backup.ExportDialOptions()
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return modeResult{}, err
	}
	defer cli.Close()
	p := &backup.Pipeline{Snapshotter: &backup.KeysExporter{Client: cli}, Compression: backup.Zstd, MemoryBudget: budget / 2}
	start := time.Now()
	res, err := p.Run(ctx, backup.Request{Cluster: "bench", Name: env.Name, Kind: backup.ManifestKindKeysJSON,
		Targets: []backup.Target{{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: bucket}}}})
	wall := time.Since(start)
	if err != nil {
		return modeResult{}, err
	}
	m := res.Outcomes[0].Manifest
	return modeResult{Wall: wall.Seconds(), Raw: res.Raw.Size, Stored: res.Stored.Size,
		Key: backup.ClusterPrefix(m.Cluster) + m.DataKey, ID: m.ID}, nil
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
	path := filepath.Join(dir, "keys.jsonl")
	fetched, err := (&restore.Restorer{}).Fetch(ctx, b, path)
	if err != nil {
		return modeResult{}, err
	}
	if _, err := (&restore.Importer{Client: cli, TempDir: dir, BatchSize: 100}).ImportFile(ctx, path); err != nil {
		return modeResult{}, err
	}
	return modeResult{Wall: time.Since(start).Seconds(), Raw: fetched.Raw.Size, Stored: fetched.Stored.Size}, nil
}
