//go:build !benchlean

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	// synthetic full backup alone.
	Restore time.Duration
}

// measureCompaction compacts the chain up to last (zstd, as the full
// backups), then restores last again.
func measureCompaction(ctx context.Context, env modeEnv, last int64, dir string) (*compactReport, error) {
	bucket, err := env.bucket()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// Writing 5 to clear_refs resets VmHWM (Linux 4.0): the peak is then
	// the compaction's.
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	sources := []restore.Source{{Name: "minio", Catalog: bucket}}
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
	start := time.Now()
	if _, err := (&restore.Restorer{}).RestorePoint(ctx, plan, restore.Member{Name: "m", DataDir: filepath.Join(dir, "point"),
		PeerURLs: []string{"http://127.0.0.1:2380"}}); err != nil {
		return nil, err
	}
	rep.Restore = time.Since(start)
	return rep, nil
}

// compactedRestoreTarget is the most the restore of the newest point after
// compaction may take, against the restore of the full backup alone.
const compactedRestoreTarget = 1.3

// compactionRows returns the table rows of c: figure, measured and, when
// judged is set (the 1 GiB full of pitr-restore, not the empty etcd of
// pitr), the verdict against the full backup alone. fullOnly and point are
// the restores of the full backup alone and of the point before
// compaction.
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
	verdictText := ""
	if judged && fullOnly > 0 {
		verdictText = fmt.Sprintf("<= %.1fx the full alone: %s", compactedRestoreTarget, verdict(c.Restore.Seconds()/fullOnly.Seconds() <= compactedRestoreTarget))
	}
	return [][3]string{
		{fmt.Sprintf("compaction to revision %d: %d segments, %d events (replay, store, drill)", c.Revision, c.Segments, c.Events),
			fmt.Sprintf("%s: %.0f events/s (replay %s), %s stored", c.Elapsed.Round(time.Millisecond), rate(c.Events, c.Elapsed), c.Replay.Round(time.Millisecond), formatBytes(c.StoredBytes)), ""},
		{"compaction peak RSS (VmHWM of the bench process, reset before)", formatBytes(c.HWM), ""},
		{fmt.Sprintf("restore of revision %d after compaction (the synthetic full alone)", c.Revision),
			fmt.Sprintf("%s: %s the point restore before compaction, %s the full alone", c.Restore.Round(time.Millisecond), ratio(point), ratio(fullOnly)), verdictText},
	}
}
