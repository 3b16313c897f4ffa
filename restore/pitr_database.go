package restore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/server/v3/storage/datadir"
)

// RestorePointDatabase writes to path the database of plan's point: the
// full backup's snapshot as etcd sent it (its sha256 trailer removed), with
// plan's segments applied offline exactly as RestorePoint applies them
// (every digest checked, one write transaction per source revision). Then
// the leases no key is attached to are revoked (replay cannot tell a
// revoked lease from a live one without keys), the store is compacted at
// the point's revision, and the database defragmented: it holds the live
// keys, not every revision replayed. It is what a snapshot of the source
// taken at the point, just after a compaction there, would hold, not a
// member's data directory: etcd's membership, cluster ID and consistent
// index stay those of the full backup's snapshot, and are rewritten, as
// for any snapshot, when a member is restored from it. Compaction
// (package compact) stores it as a synthetic full backup.
//
// The work happens in a temporary directory next to path, and the database
// is renamed to path at the end: a failure leaves nothing at path. path
// must not exist.
func (r *Restorer) RestorePointDatabase(ctx context.Context, plan *PointPlan, path string) (*PointResult, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if plan == nil || plan.Full.Manifest == nil {
		return nil, errors.New("restore of a point's database: no plan")
	}
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("%w: %s", ErrTargetExists, path)
	}
	for _, s := range plan.Segments {
		unpin, err := r.pin(ctx, s)
		if err != nil {
			return nil, err
		}
		defer unpin()
	}
	path = filepath.Clean(path)
	work, err := os.MkdirTemp(filepath.Dir(path), "."+filepath.Base(path)+".pitr-")
	if err != nil {
		return nil, fmt.Errorf("create temporary directory: %w", err)
	}
	defer os.RemoveAll(work)
	dataDir := filepath.Join(work, "data")
	db := datadir.ToBackendFileName(dataDir)
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		return nil, fmt.Errorf("create temporary directory: %w", err)
	}
	if _, err := r.Fetch(ctx, plan.Full, db); err != nil {
		return nil, err
	}
	if err := removeTrailer(db); err != nil {
		return nil, err
	}
	res := &PointResult{}
	if err := r.replay(ctx, plan, dataDir, 0, true, res); err != nil {
		return nil, fmt.Errorf("restore %s of cluster %q: %w", plan.Point, plan.Cluster, err)
	}
	if err := publish(db, path); err != nil {
		return nil, err
	}
	res.DataDir = path
	r.logger().Info("point database restored", "cluster", plan.Cluster, "point", plan.Point.String(), "path", path,
		"full", plan.Full.ID, "full_revision", res.FullRevision, "revision", res.Revision,
		"segments", res.Segments, "events", res.Events, "replay", res.Replay)
	return res, nil
}

// removeTrailer cuts etcd's sha256 trailer off a fetched snapshot (Fetch
// checked it): what remains is the bbolt database. A database is a whole
// number of pages, so a trailer is there when the size is one past a
// multiple of 512, as etcdutl decides.
func removeTrailer(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("stat fetched snapshot: %w", err)
	}
	if fi.Size()%512 != sha256.Size {
		return nil
	}
	if err := os.Truncate(path, fi.Size()-sha256.Size); err != nil {
		return fmt.Errorf("remove the snapshot's trailer: %w", err)
	}
	return nil
}
