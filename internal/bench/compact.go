//go:build !benchlean

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/compact"
	"github.com/etcdbackup/etcdbackup/restore"
)

// compactReport is what compacting a chain, then restoring its newest
// point from the synthetic full backup, cost.
type compactReport struct {
	Events, Segments int64
	Revision         int64
	Elapsed, Replay  time.Duration
	// HWM is this process's peak RSS during the compaction (its peak is
	// reset first), StoredBytes the synthetic full backup's size.
	HWM, StoredBytes int64
	// Restore is the restore of the newest point afterwards: the
	// synthetic full backup alone (the median of Rounds when there are
	// any).
	Restore time.Duration
	// Rounds pair, in seconds, a restore of the newest point after
	// compaction (Wall) with a restore of the chain's full backup alone
	// (Base) run next to it, which of the two first alternating from
	// round to round; Quiet as in the backup modes' rounds.
	Rounds []pair `json:",omitempty"`
}

// compactRestoreRounds is how many rounds of paired restores follow a
// compaction: as many as a wall-time verdict needs quiet ones.
const compactRestoreRounds = minQuietRounds

// measureCompaction compacts the chain up to last (zstd, as the full
// backups), then restores last again, beside restores of the chain's full
// backup alone, in compactRestoreRounds rounds; store is the MinIO server
// env reads from (its CPU is the restores', not others').
func measureCompaction(ctx context.Context, env modeEnv, store *server, last int64, dir string) (*compactReport, error) {
	bucket, err := env.bucket()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	sources := []restore.Source{{Name: "minio", Catalog: bucket}}
	before, err := restore.FindPoint(ctx, sources, restore.Point{Cluster: "bench", Revision: last})
	if err != nil {
		return nil, err
	}
	// Writing 5 to clear_refs resets VmHWM (Linux 4.0): the peak is then
	// the compaction's.
	resetHWM()
	c := &compact.Compactor{Restorer: &restore.Restorer{TempDir: dir}, Pipeline: &backup.Pipeline{Compression: backup.Zstd}}
	res, err := c.Compact(ctx, compact.Request{Cluster: "bench", ToRevision: last, Sources: sources,
		Targets: []compact.Target{{Target: backup.Target{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: bucket}}, Catalog: bucket}}})
	if err != nil {
		return nil, fmt.Errorf("compact: %w", err)
	}
	rep := &compactReport{Events: res.Events, Segments: res.Synthetic.Segments, Revision: res.Revision, Elapsed: res.Elapsed,
		Replay: res.Replay, HWM: selfHWM(), StoredBytes: res.Backup.Stored.Size}
	plan, err := restore.FindPoint(ctx, sources, restore.Point{Cluster: "bench", Revision: last})
	if err != nil {
		return nil, err
	}
	if plan.Full.ID != res.ID || len(plan.Segments) != 0 {
		return nil, fmt.Errorf("revision %d plans %s and %d segments, not the synthetic full backup", last, plan.Full.ID, len(plan.Segments))
	}
	r := &restore.Restorer{}
	compacted := func(ctx context.Context, m restore.Member) error { _, err := r.RestorePoint(ctx, plan, m); return err }
	full := func(ctx context.Context, m restore.Member) error {
		_, err := r.Restore(ctx, before.Full, m)
		return err
	}
	var walls []float64
	for i := range compactRestoreRounds {
		var p pair
		var others [2]float64
		first, second := compacted, full
		if i%2 == 1 {
			first, second = full, compacted
		}
		a, oa, err := timedRestore(ctx, filepath.Join(dir, "restore"), store, first)
		if err != nil {
			return nil, err
		}
		b, ob, err := timedRestore(ctx, filepath.Join(dir, "restore"), store, second)
		if err != nil {
			return nil, err
		}
		p.Wall, p.Base, others = a, b, [2]float64{oa, ob}
		if i%2 == 1 {
			p.Wall, p.Base = b, a
		}
		p.Quiet = others[0] < quietCores && others[1] < quietCores
		rep.Rounds = append(rep.Rounds, p)
		walls = append(walls, p.Wall)
	}
	rep.Restore = time.Duration(median(walls) * float64(time.Second))
	return rep, nil
}

// timedRestore runs fn into a new member data directory dir, removes it
// and writes back what it left dirty, and returns fn's wall time in
// seconds and the cores other processes than this one and store used
// meanwhile.
func timedRestore(ctx context.Context, dir string, store *server, fn func(context.Context, restore.Member) error) (wall, others float64, err error) {
	m := restore.Member{Name: "m", DataDir: dir, PeerURLs: []string{"http://127.0.0.1:2380"}}
	busy0, store0 := busySeconds(), store.cpuSeconds()
	self0, _ := procCPUSeconds(os.Getpid())
	start := time.Now()
	err = fn(ctx, m)
	wall = time.Since(start).Seconds()
	busy1, store1 := busySeconds(), store.cpuSeconds()
	self1, _ := procCPUSeconds(os.Getpid())
	if err != nil {
		return 0, 0, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return 0, 0, err
	}
	syscall.Sync()
	if wall > 0 {
		others = max(0, ((busy1-busy0)-(self1-self0)-(store1-store0))/wall)
	}
	return wall, others, nil
}

// compactedRestoreTarget is the most the restore of the newest point after
// compaction may take, against the restore of the full backup alone.
const compactedRestoreTarget = 1.3

// compactionRows returns the table rows of c: figure, measured and, when
// judged is set (the hour of writes of pitr-restore, which the target is
// about, not the minute of pitr), the verdict against the full backup
// alone restored next to it. fullOnly and point are the restores of the
// full backup alone and of the point before compaction.
func compactionRows(c *compactReport, fullOnly, point time.Duration, judged bool) [][3]string {
	if c == nil {
		return [][3]string{{"compaction", "not measured by this run", ""}}
	}
	ratio := func(d time.Duration) string {
		if d <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.2fx", c.Restore.Seconds()/d.Seconds())
	}
	restoreRow := [3]string{fmt.Sprintf("restore of revision %d after compaction (the synthetic full alone)", c.Revision),
		fmt.Sprintf("%s: %s the point restore before compaction, %s the full alone (one run each)", c.Restore.Round(time.Millisecond), ratio(point), ratio(fullOnly)),
		"— (one run: no verdict)"}
	if len(c.Rounds) > 0 {
		f := judgeWall(c.Rounds)
		restoreRow[0] = fmt.Sprintf("restore of revision %d after compaction (the synthetic full alone), against the full backup alone restored next to it", c.Revision)
		restoreRow[1] = fmt.Sprintf("median %s, %s the point restore before compaction; %s", c.Restore.Round(time.Millisecond), ratio(point), f)
		restoreRow[2] = "— (the target is judged after an hour of writes)"
		if judged {
			restoreRow[2] = fmt.Sprintf("<= %.1fx the full alone: %s", compactedRestoreTarget, f.verdictAtMost(compactedRestoreTarget))
		}
	}
	return [][3]string{
		{fmt.Sprintf("compaction to revision %d: %d segments, %d events (replay, store, drill)", c.Revision, c.Segments, c.Events),
			fmt.Sprintf("%s: %.0f events/s (replay %s), %s stored", c.Elapsed.Round(time.Millisecond), rate(c.Events, c.Elapsed), c.Replay.Round(time.Millisecond), formatBytes(c.StoredBytes)), ""},
		{"compaction peak RSS (VmHWM of the bench process, reset before)", formatBytes(c.HWM), ""},
		restoreRow,
	}
}
