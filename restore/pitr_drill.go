package restore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/storage/datadir"
)

// PointDrillResult records a drill of a point in time. It holds no key
// material and can be stored as is.
type PointDrillResult struct {
	Point
	// Full is the ID of the full backup the point was restored from, and
	// Segments the number of delta segments of the chain read.
	Full     string
	Segments int
	// Started is when the drill started, Duration how long it took.
	Started  time.Time
	Duration time.Duration
	// Restored is what the restore reported: revisions and events.
	Restored PointResult
	// Status is the restored database's status, read with etcd's own code.
	Status SnapshotStatus
	// Err is why the drill failed; nil when it passed.
	Err error
}

// Passed reports whether the drill restored the point: the restored
// database is at the revision the replay reached, which is the point's
// revision when the point is one.
func (d *PointDrillResult) Passed() bool {
	return d.Err == nil && d.Status.Revision == d.Restored.Revision &&
		(d.Revision == 0 || d.Status.Revision == d.Revision)
}

// DrillPoint proves that plan restores, without touching any live cluster:
// it restores the point into a single-member data directory under
// r.TempDir (every digest checked, every event applied, as RestorePoint
// does), reads the database's status with etcd's own code and checks its
// revision. The directory is removed at the end. A drill of the newest
// revision of a chain reads the whole chain.
//
// The result is never nil; on failure its Err is the error returned.
func (r *Restorer) DrillPoint(ctx context.Context, plan *PointPlan) (*PointDrillResult, error) {
	res := &PointDrillResult{Started: r.now()}
	fail := func(err error) (*PointDrillResult, error) {
		res.Err = err
		res.Duration = r.now().Sub(res.Started)
		return res, err
	}
	if plan == nil || plan.Full.Manifest == nil {
		return fail(errors.New("drill of a point: no plan"))
	}
	res.Point, res.Full, res.Segments = plan.Point, plan.Full.ID, len(plan.Segments)
	work, err := os.MkdirTemp(r.TempDir, "etcdbackup-drill-point-")
	if err != nil {
		return fail(fmt.Errorf("create drill directory: %w", err))
	}
	defer os.RemoveAll(work)
	dir := filepath.Join(work, "data")
	restored, err := r.RestorePoint(ctx, plan, Member{Name: "drill", DataDir: dir, PeerURLs: []string{drillPeerURL}})
	if err != nil {
		return fail(err)
	}
	res.Restored = *restored
	if res.Status, err = Status(datadir.ToBackendFileName(dir)); err != nil {
		return fail(err)
	}
	res.Duration = r.now().Sub(res.Started)
	if !res.Passed() {
		return fail(fmt.Errorf("%w: the restored database is at revision %d, the replay reached %d", ErrReplay, res.Status.Revision, res.Restored.Revision))
	}
	r.logger().Info("point drill passed", "cluster", plan.Cluster, "point", plan.Point.String(), "full", res.Full,
		"segments", res.Segments, "revision", res.Status.Revision, "keys", res.Status.TotalKeys, "elapsed", res.Duration)
	return res, nil
}
