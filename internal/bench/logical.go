package main

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdbackup/etcdbackup/backup"
)

// runExportKeys stores every key of the etcd as a keys-json logical backup
// through the pipeline, zstd: the export row, read against the snapshot
// backup of the same etcd.
func runExportKeys(ctx context.Context, env modeEnv) (modeResult, error) {
	return exportKeysWithin(ctx, env, 0, backup.ManifestKindKeysJSON)
}

// runExportKeysMem is runExportKeys within a budget of the CLI's default
// --memory, split as the CLI splits it, in this binary: the CLI itself is
// the cli-export mode.
func runExportKeysMem(ctx context.Context, env modeEnv) (modeResult, error) {
	return exportKeysWithin(ctx, env, 32<<20, backup.ManifestKindKeysJSON)
}

// runExportKeysZipMem is runExportKeysMem writing a keys zip (export
// --type=keys): its index and central directory spooled to env.TmpDir's
// file system, its memory within the same budget.
func runExportKeysZipMem(ctx context.Context, env modeEnv) (modeResult, error) {
	return exportKeysWithin(ctx, env, 32<<20, backup.ManifestKindKeys)
}

// exportKeysWithin is the export within a budget, with the memory limit
// and the client's fixed gRPC windows the CLI uses. A budget of 0 is the
// library's defaults. kind is the manifest kind of the object written.
func exportKeysWithin(ctx context.Context, env modeEnv, budget int64, kind string) (modeResult, error) {
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
	p := &backup.Pipeline{Snapshotter: &backup.KeysExporter{Client: cli, Kind: kind}, Compression: backup.Zstd, MemoryBudget: budget / 2}
	start := time.Now()
	res, err := p.Run(ctx, backup.Request{Cluster: "bench", Name: env.Name, Kind: kind,
		Targets: []backup.Target{{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: bucket}}}})
	wall := time.Since(start)
	if err != nil {
		return modeResult{}, err
	}
	m := res.Outcomes[0].Manifest
	return modeResult{Wall: wall.Seconds(), Raw: res.Raw.Size, Stored: res.Stored.Size,
		Key: backup.ClusterPrefix(m.Cluster) + m.DataKey, ID: m.ID}, nil
}
