//go:build !benchlean

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Transactions of the fill: etcd refuses more than 128 operations
// (--max-txn-ops) or 1.5 MiB (--max-request-bytes) in one request.
const (
	fillBatchOps   = 100
	fillBatchBytes = 1 << 20
	fillWriters    = 2 // keep a transaction in flight while the next one is sent
)

// fillMeta describes a filled etcd data directory. It is written once the
// fill has ended and etcd has stopped cleanly, so a directory without it
// is an interrupted fill and is thrown away.
type fillMeta struct {
	Generator   string
	Seed        int64
	Target      int64
	Objects     int64 // objects generated, including the few skipped as duplicates
	Keys        int64 // keys written
	KVBytes     int64
	DBSize      int64
	DBSizeInUse int64
	Seconds     float64 // time spent filling, summed over the fills it grew from
}

// fillCache keeps filled etcd data directories between bench runs, one
// per generator, seed and target size, under dir.
type fillCache struct {
	dir  string
	seed int64
	self string // this binary, to start etcd
	logs string // directory for etcd's logs
}

func (c *fillCache) path(target int64) string {
	return filepath.Join(c.dir, fmt.Sprintf("%s-seed%d-%d", genVersion, c.seed, target))
}

func (c *fillCache) load(target int64) (fillMeta, bool) {
	b, err := os.ReadFile(filepath.Join(c.path(target), "fill.json"))
	if err != nil {
		return fillMeta{}, false
	}
	var m fillMeta
	if json.Unmarshal(b, &m) != nil || m.Generator != genVersion || m.Seed != c.seed || m.Target != target {
		return fillMeta{}, false
	}
	return m, true
}

// ensure returns the data directory of an etcd filled to at least target
// bytes of database: from the cache, or filled now. A new fill starts from
// a copy of the largest smaller cached one, so growing from 256 MiB to
// 1 GiB writes only the difference.
func (c *fillCache) ensure(ctx context.Context, target int64, label string) (string, fillMeta, bool, error) {
	dir := c.path(target)
	data := filepath.Join(dir, "data")
	if m, ok := c.load(target); ok {
		return data, m, true, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", fillMeta{}, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fillMeta{}, false, err
	}
	meta := fillMeta{Generator: genVersion, Seed: c.seed, Target: target}
	if base, ok := c.largestBelow(target); ok {
		progress("fill %s: starting from the cached %s fill", label, formatBytes(base.Target))
		if err := copyDir(filepath.Join(c.path(base.Target), "data"), data); err != nil {
			return "", fillMeta{}, false, fmt.Errorf("copy cached fill: %w", err)
		}
		meta = base
		meta.Target = target
	}

	start := time.Now()
	// fsync buys nothing here: the cache is valid only once fill.json is
	// written after a clean stop, and etcd runs with fsync when measured.
	srv, err := startEtcd(ctx, c.self, data, filepath.Join(c.logs, "etcd-fill.log"), true)
	if err != nil {
		return "", fillMeta{}, false, err
	}
	ferr := fill(ctx, srv, &meta, label)
	if st, err := srv.status(ctx); err == nil {
		meta.DBSize, meta.DBSizeInUse = st.DbSize, st.DbSizeInUse
	}
	serr := srv.stop(2 * time.Minute)
	if err := errors.Join(ferr, serr); err != nil {
		return "", fillMeta{}, false, err
	}
	meta.Seconds += time.Since(start).Seconds()
	b, _ := json.MarshalIndent(meta, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "fill.json"), b, 0o644); err != nil {
		return "", fillMeta{}, false, err
	}
	return data, meta, false, nil
}

// largestBelow returns the cached fill of the largest target below target.
func (c *fillCache) largestBelow(target int64) (fillMeta, bool) {
	matches, _ := filepath.Glob(filepath.Join(c.dir, fmt.Sprintf("%s-seed%d-*", genVersion, c.seed)))
	var best fillMeta
	found := false
	for _, p := range matches {
		var t int64
		if _, err := fmt.Sscanf(filepath.Base(p)[strings.LastIndexByte(filepath.Base(p), '-')+1:], "%d", &t); err != nil || t >= target {
			continue
		}
		if m, ok := c.load(t); ok && (!found || m.Target > best.Target) {
			best, found = m, true
		}
	}
	return best, found
}

// batch is one transaction of the fill.
type batch struct {
	ops     []clientv3.Op
	objects int64 // objects generated for it, duplicates included
	bytes   int64
}

// fill writes generated objects until etcd's database reaches meta.Target,
// continuing after meta.Objects objects, and updates meta.
func fill(ctx context.Context, srv *etcdServer, meta *fillMeta, label string) error {
	cli, err := srv.client()
	if err != nil {
		return err
	}
	defer cli.Close()

	g := newGen(meta.Seed)
	for range meta.Objects {
		g.next() // the cached fill wrote these
	}

	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan batch, 2*fillWriters)
	go func() {
		defer close(batches)
		for {
			b := batch{}
			seen := map[string]bool{}
			for len(b.ops) < fillBatchOps && b.bytes < fillBatchBytes {
				k, v := g.next()
				b.objects++
				if seen[k] { // etcd refuses a key twice in one transaction
					continue
				}
				seen[k] = true
				b.ops = append(b.ops, clientv3.OpPut(k, string(v)))
				b.bytes += int64(len(k) + len(v))
			}
			select {
			case batches <- b:
			case <-fctx.Done():
				return
			}
		}
	}()

	// The committed batches are a prefix of the generated ones, so
	// meta.Objects says where a later fill continues.
	var (
		mu       sync.Mutex
		firstErr error
		written  atomic.Int64
		stopping atomic.Bool
		wg       sync.WaitGroup
	)
	// take receives the next batch and decides whether to write it in one
	// step, so that no batch is written after one that was skipped.
	var recv sync.Mutex
	take := func() (batch, bool, bool) {
		recv.Lock()
		defer recv.Unlock()
		b, ok := <-batches
		return b, ok, !stopping.Load()
	}
	for range fillWriters {
		wg.Go(func() {
			for {
				b, ok, write := take()
				if !ok {
					return
				}
				if !write {
					continue // drain: later than every committed batch
				}
				if _, err := cli.Txn(ctx).Then(b.ops...).Commit(); err != nil {
					mu.Lock()
					if firstErr == nil && !stopping.Load() {
						firstErr = fmt.Errorf("fill: write: %w", err)
					}
					mu.Unlock()
					stopping.Store(true)
					cancel()
					continue
				}
				mu.Lock()
				meta.Objects += b.objects
				meta.Keys += int64(len(b.ops))
				meta.KVBytes += b.bytes
				mu.Unlock()
				written.Add(b.bytes)
			}
		})
	}

	// Poll often: the fill writes tens of MB/s, and the size is checked
	// only here.
	start := time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastLog := time.Now()
	for !stopping.Load() {
		select {
		case <-fctx.Done():
			stopping.Store(true)
			continue
		case <-tick.C:
		}
		st, err := cli.Status(fctx, srv.endpoint)
		if err != nil {
			continue // a busy server; ask again at the next tick
		}
		if time.Since(lastLog) >= 10*time.Second {
			w := written.Load()
			progress("fill %s: %s of keys and values written, database %s (%.0f MB/s)", label, formatBytes(w), formatBytes(st.DbSize), float64(w)/1e6/time.Since(start).Seconds())
			lastLog = time.Now()
		}
		if st.DbSize >= meta.Target {
			stopping.Store(true)
		}
	}
	cancel()
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// copyDir copies a directory tree of regular files.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("copy %s: not a regular file", path)
		}
		return copyFile(path, target)
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
