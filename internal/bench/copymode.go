package main

import (
	"context"
	"fmt"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// The copy modes copy the backup (b) took once per etcd size (the
// restore modes' object: uncompressed, so as large as the etcd's
// snapshot, 1 GiB at the 1 GiB size; a copy never decodes, so its bytes
// cost the same compressed or encrypted) from the bench's MinIO server to the same bucket of a
// second MinIO server with the same credentials (modeEnv.To). The parent
// checks the copy's size on the second server and empties its bucket
// after each run, so that no run finds the backup there already.

// copyModes are the modes of the copy group. They run in the lean binary,
// as the backup modes do.
var copyModes = []mode{
	{name: "copy-get-put", short: "(j) minio-go Get→Put", label: "(j) minio-go `GetObject` streamed into `PutObject` of the second server, what `mc cp` does between two aliases (16 MiB parts, 4 in parallel)", group: groupCopy, source: "stream", run: runGetPut},
	{name: "cli-copy", short: "(k) CLI copy", label: "(k) `etcdbackup copy --backup=ID` as shipped (`make release`), a process of its own, at its defaults (`--memory=32MiB`): checks the sha256 on the way, commits the manifest last, no age identity; wall time includes the process' start", group: groupCopy, source: "stream", run: runCLICopy},
}

// minioClient is a client of the MinIO server at addr with env's
// credentials.
func minioClient(env modeEnv, addr string) (*minio.Client, error) {
	return minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(env.Access, env.Secret, ""), Region: "us-east-1", BucketLookup: minio.BucketLookupPath})
}

// runGetPut streams the source's data object from one server into the
// other, as `mc cp alias1/... alias2/...` does.
func runGetPut(ctx context.Context, env modeEnv) (modeResult, error) {
	src, err := minioClient(env, env.S3)
	if err != nil {
		return modeResult{}, err
	}
	dst, err := minioClient(env, env.To)
	if err != nil {
		return modeResult{}, err
	}
	start := time.Now()
	obj, err := src.GetObject(ctx, env.Bucket, env.Source.Key, minio.GetObjectOptions{})
	if err != nil {
		return modeResult{}, err
	}
	defer obj.Close()
	info, err := obj.Stat()
	if err != nil {
		return modeResult{}, fmt.Errorf("stat %s: %w", env.Source.Key, err)
	}
	up, err := dst.PutObject(ctx, env.Bucket, env.Source.Key, obj, info.Size,
		minio.PutObjectOptions{PartSize: uint64(env.PartSize), NumThreads: 4, ContentType: "application/octet-stream"})
	if err != nil {
		return modeResult{}, fmt.Errorf("put %s: %w", env.Source.Key, err)
	}
	return modeResult{Wall: time.Since(start).Seconds(), Raw: info.Size, Stored: up.Size, Key: env.Source.Key}, nil
}

// runCLICopy is `etcdbackup copy` of the source's backup at its defaults.
func runCLICopy(ctx context.Context, env modeEnv) (modeResult, error) {
	to := env
	to.S3 = env.To
	res, _, err := runCLI(ctx, env, "copy", "--from="+cliDestination(env), "--to="+cliDestination(to), "--cluster=bench",
		"--backup="+env.Source.ID, "--output=json")
	if err != nil {
		return modeResult{}, err
	}
	m, err := findManifest(ctx, to, env.Source.ID)
	if err != nil {
		return modeResult{}, fmt.Errorf("the copy on the second server: %w", err)
	}
	res.ID, res.Key = m.ID, env.Source.Key
	res.Raw, res.Stored = m.Stored.Size, m.Stored.Size
	return res, nil
}
