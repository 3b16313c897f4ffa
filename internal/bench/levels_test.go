//go:build !benchlean

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/backup/backuptest"
)

// BenchmarkZstdLevels backs up one Kubernetes-like etcd snapshot (the
// bench's generator, written by etcd's storage packages) through the
// pipeline at each compression, to an uploader that counts and discards,
// and reports the stored/raw ratio and the process CPU per GiB of raw
// snapshot: the compressor's own cost is a level's CPU less none's (which
// is the trailer check, the stored digest and the copies). It runs with
// the library's defaults (no budget: two encoders, 8 MiB windows) and
// within the CLI's default --memory=32MiB (16 MiB for the compressor: two
// encoders, 2 MiB windows). The snapshot's size is
// ETCDBACKUP_LEVELS_SIZE MiB (default 64).
//
//	go test -run '^$' -bench ZstdLevels -benchtime 3x ./internal/bench/
func BenchmarkZstdLevels(b *testing.B) {
	stream := levelsSnapshot(b)
	for _, budget := range []int64{0, 16 << 20} {
		for _, c := range []backup.Compression{backup.None, backup.ZstdFastest, backup.ZstdDefault, backup.ZstdBetter} {
			b.Run(fmt.Sprintf("budget=%dMiB/%s", budget>>20, c), func(b *testing.B) {
				var stored int64
				cpu0 := processCPU(b)
				for b.Loop() {
					u := &countingUploader{}
					p := &backup.Pipeline{Snapshotter: backuptest.NewSnapshotter(stream, 1), Compression: c, MemoryBudget: budget}
					if _, err := p.Run(context.Background(), backup.Request{Cluster: "bench", Name: "levels",
						Targets: []backup.Target{{Destination: "discard", Uploader: u}}}); err != nil {
						b.Fatal(err)
					}
					stored = u.n
				}
				cpu := processCPU(b) - cpu0
				b.SetBytes(int64(len(stream)))
				b.ReportMetric(float64(stored)/float64(len(stream)), "stored/raw")
				b.ReportMetric(cpu.Seconds()/float64(b.N)/(float64(len(stream))/(1<<30)), "cpu-s/GiB")
			})
		}
	}
}

var levelsStream = sync.OnceValues(func() ([]byte, error) {
	size := int64(64)
	if s := os.Getenv("ETCDBACKUP_LEVELS_SIZE"); s != "" {
		if _, err := fmt.Sscan(s, &size); err != nil {
			return nil, fmt.Errorf("ETCDBACKUP_LEVELS_SIZE: %w", err)
		}
	}
	g := newGen(1)
	keys := map[string]string{}
	for n := int64(0); n < size<<20; {
		k, v := g.next()
		keys[k] = string(v)
		n += int64(len(k) + len(v))
	}
	stream, _, err := backuptest.KeysSnapshot(keys)
	return stream, err
})

func levelsSnapshot(b *testing.B) []byte {
	b.Helper()
	stream, err := levelsStream()
	if err != nil {
		b.Fatal(err)
	}
	return stream
}

// processCPU is the process' user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// countingUploader stores nothing: it counts the bytes of the data object.
type countingUploader struct{ n int64 }

func (u *countingUploader) Upload(_ context.Context, _ *backup.Manifest, r io.Reader) error {
	n, err := io.Copy(io.Discard, r)
	u.n = n
	return err
}

func (u *countingUploader) Commit(context.Context, *backup.Manifest) error { return nil }
