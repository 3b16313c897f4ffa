//go:build !benchlean

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The "pitr-restore" subcommand measures what a point-in-time restore
// costs against restoring a full backup alone: on a copy of the cached
// filled etcd (-full, 1 GiB by default), a full backup is taken, then a
// follower (its own process) stores -writes puts of -value bytes (one hour
// at 1,000 writes/s by default), written as fast as etcd takes them; then
// the last revision is restored offline, and the full backup alone.
//
//	bench-out/etcdbackup-bench pitr-restore [-full 1GiB] [-writes 3600000] [-value 1024]
func runPITRRestore(args []string) error {
	fs := flag.NewFlagSet("pitr-restore", flag.ContinueOnError)
	fullSize := fs.String("full", "1GiB", "size of the filled etcd the full backup is taken of")
	writes := fs.Int("writes", 3_600_000, "puts after the full backup (one hour at 1,000/s)")
	valueSize := fs.Int("value", 1024, "value size in bytes")
	work := fs.String("work", "bench-out", "directory for the fill cache, scratch files, logs and results")
	out := fs.String("out", "BENCHMARKS.md", "report to render again with these figures")
	chart := fs.String("chart", "BENCHMARKS.png", "chart to render again")
	resume := fs.Bool("resume", false, "do nothing when the saved results hold this step of the same run, commit and flags")
	if err := fs.Parse(args); err != nil {
		return err
	}
	command := pitrCommand("pitr-restore", withoutFlag(args, "resume"))
	if *resume && stepDone(filepath.Join(*work, "results.json"), command, func(r *results) (time.Time, string, string) { return r.PointRestore.step() }) {
		progress("pitr-restore: done in the saved results of this commit")
		return nil
	}
	if *fullSize == "0" {
		return errors.New("-full: pitr-restore needs a filled etcd")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	self, run, logs, err := scratchDirs(*work, "pitr-restore-run")
	if err != nil {
		return err
	}
	defer os.RemoveAll(run)

	rep := pitrReport{Started: time.Now().UTC(), Command: command, Commit: cleanCommit(), Writes: *writes, Value: *valueSize}
	if err := filledCopy(ctx, *work, *fullSize, self, logs, filepath.Join(run, "etcd"), &rep); err != nil {
		return err
	}
	minio, err := startMinIO(ctx, minioBinary(), filepath.Join(run, "minio"), filepath.Join(logs, "pitr-restore-minio.log"))
	if err != nil {
		return err
	}
	defer minio.stop(time.Minute)
	// fsync off: the writes are not what is measured, and an hour of them
	// at etcd's own pace takes long enough.
	etcd, err := startEtcd(ctx, self, filepath.Join(run, "etcd"), filepath.Join(logs, "pitr-restore-etcd.log"), true)
	if err != nil {
		return err
	}
	defer etcd.stop(time.Minute)
	env := modeEnv{Etcd: etcd.endpoint, S3: minio.addr, Access: minio.access, Secret: minio.secret, Bucket: benchBucket, Name: "pitr"}
	progress("pitr-restore: full backup")
	if err := pitrFull(ctx, env); err != nil {
		return err
	}
	lean, err := leanBinary(self, backupModes)
	if err != nil {
		return err
	}
	last, segments, err := followBurst(ctx, lean, env, logs, *writes, *valueSize)
	if err != nil {
		return err
	}
	if err := etcd.stop(time.Minute); err != nil {
		return err
	}
	progress("pitr-restore: restoring revision %d, then the full backup alone", last)
	// Twice, keeping the faster of each: the first run reads MinIO's
	// files cold.
	rep.Segments = segments
	for i := range 2 {
		var r pitrReport
		dir := filepath.Join(run, fmt.Sprintf("restore-%d", i))
		if err := measureReplay(ctx, env, last, dir, &r); err != nil {
			return err
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		if i == 0 || r.FullOnly < rep.FullOnly {
			rep.FullOnly = r.FullOnly
		}
		if i == 0 || r.PointTotal < rep.PointTotal {
			rep.PointTotal, rep.Replay = r.PointTotal, r.Replay
		}
		rep.Events, rep.FullRevision, rep.RestoredRevision = r.Events, r.FullRevision, r.RestoredRevision
	}
	progress("pitr-restore: compacting the chain to revision %d", last)
	if rep.Compaction, err = measureCompaction(ctx, env, minio.server, last, filepath.Join(run, "compact")); err != nil {
		return err
	}
	return saveSection(filepath.Join(*work, "results.json"), *out, *chart, func(r *results) { r.PointRestore = &rep })
}

// followBurst starts a follower (the lean binary at path bin), writes n puts as fast as etcd takes them,
// waits until the follower has committed the last one, and stops it. It
// returns the last revision and the number of segments.
func followBurst(ctx context.Context, bin string, env modeEnv, logs string, n, size int) (int64, int, error) {
	child, lines, err := startPITRFollower(bin, env, filepath.Join(logs, "pitr-restore-follower.log"))
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = child.Process.Kill() }()
	if l, ok := <-lines; !ok || l.Kind != "chain" {
		return 0, 0, errors.New("the follower did not start its chain")
	}
	cli, err := etcd0(env)
	if err != nil {
		return 0, 0, err
	}
	defer cli.Close()
	var committed atomic.Int64
	committed.Store(1 << 62) // until the first segment: no bound
	segments := 0
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for l := range lines {
			if l.Kind == "segment" {
				segments++
				if c := committed.Load(); c == 1<<62 || l.Last > c {
					committed.Store(l.Last)
				}
			}
		}
	}()
	start := time.Now()
	last, err := burst(ctx, cli, n, size, &committed)
	if err != nil {
		return 0, 0, err
	}
	progress("pitr-restore: %d writes in %v (%.0f/s)", n, time.Since(start).Round(time.Second), float64(n)/time.Since(start).Seconds())
	deadline := time.Now().Add(10 * time.Minute)
	for c := committed.Load(); c < last || c == 1<<62; c = committed.Load() {
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("the follower committed %d of %d within 10 minutes", c, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = child.Process.Signal(syscall.SIGTERM)
	<-drained
	if err := child.Wait(); err != nil {
		return 0, 0, fmt.Errorf("follower: %w", err)
	}
	return last, segments, nil
}

func etcd0(env modeEnv) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{env.Etcd}, DialTimeout: 10 * time.Second})
}

// maxAhead bounds how far the writes of a burst run ahead of the
// follower's commits: a watcher that falls far behind leaves etcd's fast
// path for its catch-up path, which sends 1,000 revisions per pass and
// reads the whole backlog at each.
const maxAhead = 20_000

// burst writes n puts of random size-byte values over 5,000 keys from 32
// goroutines, at most maxAhead revisions past committed, and returns the
// last revision.
func burst(ctx context.Context, cli *clientv3.Client, n, size int, committed *atomic.Int64) (int64, error) {
	const workers = 32
	var (
		next, last atomic.Int64
		wg         sync.WaitGroup
		errMu      sync.Mutex
		firstErr   error
	)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			buf := make([]byte, size)
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || ctx.Err() != nil {
					return
				}
				for last.Load()-committed.Load() > maxAhead && ctx.Err() == nil {
					time.Sleep(5 * time.Millisecond)
				}
				for j := 0; j < len(buf); j += 8 {
					x := rng.Uint64()
					for k := j; k < min(j+8, len(buf)); k++ {
						buf[k] = 'a' + byte(x%26) // random letters: compress as text does
						x >>= 8
					}
				}
				resp, err := cli.Put(ctx, fmt.Sprintf("/bench/%05d", i%5000), string(buf))
				if err != nil {
					errMu.Lock()
					firstErr = cmpErr(firstErr, err)
					errMu.Unlock()
					return
				}
				for r := last.Load(); resp.Header.Revision > r && !last.CompareAndSwap(r, resp.Header.Revision); r = last.Load() {
				}
			}
		})
	}
	wg.Wait()
	return last.Load(), firstErr
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
