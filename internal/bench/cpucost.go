package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/klauspost/compress/zstd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	"go.uber.org/zap"

	"github.com/etcdbackup/etcdbackup/backup"
)

// The references of the CLI's CPU target: process CPU per GiB of the
// CLI's backup at its defaults, at most twice `etcdctl snapshot save`'s
// plus the zstd level's own cost. "save" is the save alone, "save-zstd"
// the save and then the compression of its file at the CLI's level and
// budget; the zstd level's own cost is the difference of the two.
var cpuCostModes = []mode{
	{name: "save", short: "etcdctl save", label: "(ref) what `etcdctl snapshot save` does, alone (etcd's `snapshot.SaveWithVersion`: a file, fsync, rename), in one process: the CPU of saving", group: groupBackup, reference: true, run: runSave},
	{name: "save-zstd", short: "etcdctl save, then zstd", label: "(ref) the same save, then its file compressed with zstd at the CLI's default level and memory budget (two encoders, 2 MiB windows) into /dev/null: less the save, the zstd level's own CPU", group: groupBackup, reference: true, run: runSaveZstd},
}

// saveFile saves env's etcd's snapshot to a file of env.TmpDir as
// `etcdctl snapshot save` does, and returns its path and size.
func saveFile(ctx context.Context, env modeEnv) (string, int64, error) {
	path := filepath.Join(env.TmpDir, env.Name+".db")
	if _, err := snapshot.SaveWithVersion(ctx, zap.NewNop(), clientv3.Config{Endpoints: []string{env.Etcd}, DialTimeout: 10 * time.Second}, path); err != nil {
		return "", 0, fmt.Errorf("save snapshot: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", 0, err
	}
	return path, fi.Size(), nil
}

func runSave(ctx context.Context, env modeEnv) (modeResult, error) {
	path, n, wall, err := timedSave(ctx, env)
	if path != "" {
		defer os.Remove(path)
	}
	if err != nil {
		return modeResult{}, err
	}
	return modeResult{Wall: wall, Raw: n, SnapshotOpen: wall}, nil
}

// timedSave is saveFile timed: it returns the seconds the save took too.
// The caller removes the file (path is "" when none was made).
func timedSave(ctx context.Context, env modeEnv) (path string, n int64, wall float64, err error) {
	start := time.Now()
	path, n, err = saveFile(ctx, env)
	return path, n, time.Since(start).Seconds(), err
}

// cliZstdLevels maps the library's level names (backup.Compression.Level)
// to the encoder's levels, as the library maps them.
var cliZstdLevels = map[string]zstd.EncoderLevel{"fastest": zstd.SpeedFastest, "default": zstd.SpeedDefault, "better": zstd.SpeedBetterCompression}

func runSaveZstd(ctx context.Context, env modeEnv) (modeResult, error) {
	start := time.Now()
	path, n, saved, err := timedSave(ctx, env)
	if path != "" {
		defer os.Remove(path)
	}
	if err != nil {
		return modeResult{}, err
	}
	level, ok := cliZstdLevels[backup.Zstd.Level()]
	if !ok {
		return modeResult{}, fmt.Errorf("zstd level %q unknown to the bench", backup.Zstd.Level())
	}
	f, err := os.Open(path)
	if err != nil {
		return modeResult{}, err
	}
	defer f.Close()
	cw := &countingWriter{}
	enc, err := zstd.NewWriter(cw, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(2), zstd.WithWindowSize(2<<20))
	if err != nil {
		return modeResult{}, err
	}
	if _, err := io.Copy(enc, f); err != nil {
		return modeResult{}, fmt.Errorf("compress: %w", err)
	}
	if err := enc.Close(); err != nil {
		return modeResult{}, err
	}
	return modeResult{Wall: time.Since(start).Seconds(), Raw: n, Stored: cw.n, SnapshotOpen: saved}, nil
}

// countingWriter counts and discards what is written to it.
type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}
