//go:build !benchlean

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// markdown adds the compaction's rows to a table whose full-alone and
// point restores are fullOnly and point. target says whether the full
// backup alone is the size the restore target is measured against (the
// 1 GiB of pitr-restore, not the empty etcd of pitr).
func (c *compactReport) markdown(fullOnly, point time.Duration, target bool) string {
	var b strings.Builder
	eps := float64(c.Events) / c.Elapsed.Seconds()
	fmt.Fprintf(&b, "| compaction to revision %d: %d segments, %d events (replay, store, drill) | %s: %.0f events/s (replay %s), %s stored | |\n",
		c.Revision, c.Segments, c.Events, c.Elapsed.Round(time.Millisecond), eps, c.Replay.Round(time.Millisecond), formatBytes(c.StoredBytes))
	fmt.Fprintf(&b, "| compaction peak RSS (VmHWM of the bench process, reset before) | %s | |\n", formatBytes(c.HWM))
	ratio := c.Restore.Seconds() / fullOnly.Seconds()
	verdictText := ""
	if target {
		verdictText = "<= 1.3x the full alone: " + verdict(ratio <= 1.3)
	}
	fmt.Fprintf(&b, "| restore of revision %d after compaction (the synthetic full alone) | %s: %.2fx the point restore before compaction, %.2fx the full alone | %s |\n",
		c.Revision, c.Restore.Round(time.Millisecond), c.Restore.Seconds()/point.Seconds(), ratio, verdictText)
	return b.String()
}
