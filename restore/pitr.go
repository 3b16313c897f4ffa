package restore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/zapslog"
)

// ErrNoChain is returned by FindPoint when full backups exist before the
// point but no contiguous run of delta segments leads from any of them to
// it: the point lies in a gap (a follower that was down, or compaction past
// its position).
var ErrNoChain = errors.New("no chain of delta segments reaches the point")

// MaxSegmentSize bounds the stored and raw size of a delta segment that
// restore reads into memory; a manifest claiming more is refused.
const MaxSegmentSize = 1 << 30

// Point selects a point in a cluster's history: a revision, or a time.
type Point struct {
	// Cluster is the cluster. Required.
	Cluster string
	// Revision is the store revision to restore. Exactly one of Revision
	// and Time is set.
	Revision int64
	// Time selects the last revision the follower received at or before
	// it (no earlier than etcd committed it).
	Time time.Time
	// TolerateUnavailable is as in Query.
	TolerateUnavailable bool
}

// Validate checks the point.
func (p Point) Validate() error {
	if err := backup.ValidateName("cluster", p.Cluster); err != nil {
		return err
	}
	if (p.Revision > 0) == !p.Time.IsZero() {
		return errors.New("a point is a revision or a time, exactly one of them")
	}
	if p.Revision < 0 {
		return fmt.Errorf("revision %d is negative", p.Revision)
	}
	return nil
}

// PointPlan is what restoring a point reads: a full backup and the delta
// segments after it, in revision order, contiguous.
type PointPlan struct {
	Point
	// Full is the full backup restored first.
	Full Backup
	// Segments follow Full: the first starts at or before the revision
	// after Full's, each starts at or before the revision after the
	// previous one's last, and the last reaches the point.
	Segments []Backup
}

// FindPoint finds, on every source, how to restore p: the newest full
// backup at or before the point from which contiguous delta segments reach
// it. Errors match ErrNoBackup when no full backup precedes the point, and
// ErrNoChain when none is followed by segments reaching it.
func FindPoint(ctx context.Context, sources []Source, p Point) (*PointPlan, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if len(sources) == 0 {
		return nil, errors.New("find: no sources")
	}
	all, errs := list(ctx, sources, p.Cluster)
	listErr := errors.Join(errs...)
	if listErr != nil && (!p.TolerateUnavailable || len(errs) == len(sources)) {
		return nil, fmt.Errorf("find backups of %q: %w", p.Cluster, listErr)
	}
	var fulls, segments []Backup
	seen := map[[2]int64]bool{}
	for _, b := range all {
		m := b.Manifest
		switch {
		case b.Kind == backup.KindDelta:
			if r := [2]int64{m.FirstRevision, m.LastRevision}; !seen[r] {
				seen[r] = true // the same segment on another source
				segments = append(segments, b)
			}
		case b.Kind == backup.KindBackup && m.Etcd.Revision.High > 0 && p.fullBefore(m):
			fulls = append(fulls, b)
		}
	}
	if len(fulls) == 0 {
		return nil, fmt.Errorf("%w: no full backup of cluster %q with a known revision before %s", ErrNoBackup, p.Cluster, p)
	}
	slices.SortStableFunc(segments, func(a, b Backup) int {
		return cmpInt(a.Manifest.FirstRevision, b.Manifest.FirstRevision)
	})
	slices.SortStableFunc(fulls, func(a, b Backup) int {
		return cmpInt(b.Manifest.Etcd.Revision.High, a.Manifest.Etcd.Revision.High)
	})
	for _, full := range fulls {
		if chain, ok := p.chain(full, segments); ok {
			return &PointPlan{Point: p, Full: full, Segments: chain}, nil
		}
	}
	return nil, fmt.Errorf("%w: cluster %q, %s (newest full backup before it: %s at revision %d)",
		ErrNoChain, p.Cluster, p, fulls[0].ID, fulls[0].Manifest.Etcd.Revision.High)
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// String describes the point.
func (p Point) String() string {
	if p.Revision > 0 {
		return fmt.Sprintf("revision %d", p.Revision)
	}
	return "time " + p.Time.UTC().Format(time.RFC3339Nano)
}

// fullBefore reports whether the full backup m surely holds no revision
// after the point.
func (p Point) fullBefore(m *backup.Manifest) bool {
	if p.Revision > 0 {
		return m.Etcd.Revision.High <= p.Revision
	}
	done := m.Completed
	if done.IsZero() {
		done = m.Created
	}
	return !done.After(p.Time)
}

// chain returns the segments that lead from full to the point, if they
// exist. Segments may overlap (replay skips what it applied); they may not
// leave a gap.
func (p Point) chain(full Backup, segments []Backup) ([]Backup, bool) {
	cur := full.Manifest.Etcd.Revision.Low // the database holds at least this
	var out []Backup
	for {
		if p.Revision > 0 && cur >= p.Revision {
			return out, true
		}
		if p.Revision == 0 && len(out) > 0 && out[len(out)-1].Manifest.Created.After(p.Time) {
			return out, true // that segment's revisions reach past the time
		}
		best := -1
		for i, s := range segments {
			m := s.Manifest
			if m.FirstRevision <= cur+1 && m.LastRevision > cur &&
				(best < 0 || m.LastRevision > segments[best].Manifest.LastRevision) {
				best = i
			}
		}
		if best < 0 {
			// By time, the chain ends where the segments end.
			return out, p.Revision == 0
		}
		out = append(out, segments[best])
		cur = segments[best].Manifest.LastRevision
	}
}

// PointResult describes a restored point.
type PointResult struct {
	RestoredMember
	// FullRevision is the exact revision of the restored full backup;
	// Revision the member's revision after replay: the point's revision,
	// or for a time the last revision at or before it.
	FullRevision, Revision int64
	// Segments, Revisions and Events count what was applied.
	Segments, Revisions, Events int64
	// Replay is the time spent applying events.
	Replay time.Duration
}

// RestorePoint restores the data directory of m to the point of plan: it
// restores plan.Full as Restore does, reads the restored database's exact
// revision, then applies the revisions after it from plan's segments,
// offline, through etcd's storage packages (no etcd server, no raft), one
// write transaction per source revision. Every segment's stored and raw
// size and sha256 are checked against its manifest before any of its
// events is applied.
//
// The work happens in a temporary directory next to m.DataDir, renamed to
// m.DataDir at the end: a failure leaves no data directory. Revision bumps
// are not supported with a point (m.RevisionBump must be zero).
func (r *Restorer) RestorePoint(ctx context.Context, plan *PointPlan, m Member) (*PointResult, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	out, err := r.restorePoint(ctx, plan, []Member{m}, func(staged []Member) ([]RestoredMember, error) {
		one, err := r.Restore(ctx, plan.Full, staged[0])
		if err != nil {
			return nil, err
		}
		return []RestoredMember{*one}, nil
	})
	if err != nil {
		return nil, err
	}
	return &out[0], nil
}

// RestoreClusterPoint restores the data directory of every member of c to
// the point of plan, as RestorePoint does for one: the full backup is
// restored with RestoreCluster, then the segments are applied to every
// member's database. Either every data directory is created or none is.
func (r *Restorer) RestoreClusterPoint(ctx context.Context, plan *PointPlan, c Cluster) ([]PointResult, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return r.restorePoint(ctx, plan, c.members(), func(staged []Member) ([]RestoredMember, error) {
		sc := Cluster{Token: c.Token}
		for _, m := range staged {
			sc.Members = append(sc.Members, ClusterMember{Name: m.Name, DataDir: m.DataDir, PeerURLs: m.PeerURLs})
		}
		return r.RestoreCluster(ctx, plan.Full, sc)
	})
}

// restorePoint stages members next to their data directories, restores
// the full backup into the staged directories with restoreFull, replays
// every one, and moves them all into place.
func (r *Restorer) restorePoint(ctx context.Context, plan *PointPlan, members []Member,
	restoreFull func(staged []Member) ([]RestoredMember, error)) ([]PointResult, error) {
	if plan == nil || plan.Full.Manifest == nil {
		return nil, errors.New("restore of a point: no plan")
	}
	for _, m := range members {
		if m.RevisionBump != 0 {
			return nil, errors.New("restore of a point: revision bump is not supported")
		}
		if err := checkDataDir(m.DataDir); err != nil {
			return nil, err
		}
	}
	for _, s := range plan.Segments {
		defer r.pin(s)()
	}
	staged := make([]Member, len(members))
	for i, m := range members {
		dir := filepath.Clean(m.DataDir)
		work, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".pitr-")
		if err != nil {
			return nil, fmt.Errorf("create temporary data directory: %w", err)
		}
		defer os.RemoveAll(work)
		staged[i] = m
		staged[i].DataDir = filepath.Join(work, "data")
	}
	restored, err := restoreFull(staged)
	if err != nil {
		return nil, err
	}
	out := make([]PointResult, len(members))
	for i := range staged {
		out[i].RestoredMember = restored[i]
		if err := r.replay(ctx, plan, staged[i].DataDir, &out[i]); err != nil {
			return nil, fmt.Errorf("restore %s of cluster %q, member %q: %w", plan.Point, plan.Cluster, members[i].Name, err)
		}
	}
	if err := moveAllIntoPlace(staged, members); err != nil {
		return nil, err
	}
	for i, m := range members {
		out[i].DataDir = filepath.Clean(m.DataDir)
		r.logger().Info("point restored", "cluster", plan.Cluster, "point", plan.Point.String(), "member", m.Name,
			"data_dir", out[i].DataDir, "full", plan.Full.ID, "full_revision", out[i].FullRevision, "revision", out[i].Revision,
			"segments", out[i].Segments, "events", out[i].Events, "replay", out[i].Replay)
	}
	return out, nil
}

// replay applies plan's segments to the database in dataDir.
func (r *Restorer) replay(ctx context.Context, plan *PointPlan, dataDir string, res *PointResult) (err error) {
	rp, err := openReplay(dataDir, zapslog.New(r.Logger))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, rp.close()) }()
	res.FullRevision = rp.start
	rp.target, rp.until = plan.Revision, plan.Time
	if plan.Revision > 0 && rp.start > plan.Revision {
		return fmt.Errorf("%w: the full backup %s is at revision %d, after the point", ErrReplay, plan.Full.ID, rp.start)
	}
	started := r.now()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the prefetching when replay stops early
	segs := r.prefetchSegments(pctx, plan.Segments)
	for s := range segs {
		if s.err != nil {
			return s.err
		}
		if rp.rev >= s.b.Manifest.LastRevision {
			continue
		}
		_, derr := backup.DecodeSegment(bytes.NewReader(s.raw), rp.apply)
		res.Segments++
		if errors.Is(derr, errReplayDone) {
			break
		}
		if derr != nil {
			return fmt.Errorf("segment %s: %w", s.b.ID, derr)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if plan.Revision > 0 && rp.rev != plan.Revision {
		return fmt.Errorf("%w: replay ended at revision %d, short of %d", ErrReplay, rp.rev, plan.Revision)
	}
	res.Revision, res.Revisions, res.Events = rp.rev, rp.revisions, rp.events
	res.Replay = r.now().Sub(started)
	return nil
}

// fetchedSegment is a segment read and verified, or the error doing so.
type fetchedSegment struct {
	b   Backup
	raw []byte
	err error
}

// prefetchSegments reads and verifies the segments one ahead of replay, on
// another goroutine. The channel is closed after the last segment, after
// the first error, or once ctx ends, which is how a reader that stops early
// ends the goroutine.
func (r *Restorer) prefetchSegments(ctx context.Context, segments []Backup) <-chan fetchedSegment {
	out := make(chan fetchedSegment, 1)
	go func() {
		defer close(out)
		for _, b := range segments {
			raw, err := r.readSegment(ctx, b)
			select {
			case out <- fetchedSegment{b: b, raw: raw, err: err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return out
}

// readSegment downloads, decodes and verifies one segment.
func (r *Restorer) readSegment(ctx context.Context, b Backup) ([]byte, error) {
	m := b.Manifest
	if b.Kind != backup.KindDelta || m == nil {
		return nil, fmt.Errorf("%w: %s is not a delta segment", ErrNotRestorable, b.Key)
	}
	if m.Stored.Size > MaxSegmentSize || m.Raw.Size > MaxSegmentSize {
		return nil, fmt.Errorf("%w: segment %s claims more than %d bytes", ErrIntegrity, b.ID, MaxSegmentSize)
	}
	if err := r.checkIdentities(m); err != nil {
		return nil, err
	}
	rc, err := b.Catalog.Get(ctx, b.Key)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", b.Key, err)
	}
	stored, err := io.ReadAll(io.LimitReader(rc, m.Stored.Size+1))
	rc.Close()
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", b.Key, err)
	}
	if err := compareDigest("stored segment "+b.ID, digestOf(stored), m.Stored); err != nil {
		return nil, err
	}
	dec, err := backup.NewDecoder(bytes.NewReader(stored), m.Compression, r.Identities...)
	if err != nil {
		return nil, fmt.Errorf("segment %s: %w", b.ID, err)
	}
	defer dec.Close()
	raw, err := io.ReadAll(io.LimitReader(dec, m.Raw.Size+1))
	if err != nil {
		return nil, fmt.Errorf("segment %s: %w", b.ID, err)
	}
	if err := compareDigest("segment "+b.ID, digestOf(raw), m.Raw); err != nil {
		return nil, err
	}
	return raw, nil
}

func digestOf(b []byte) backup.Digest {
	sum := sha256.Sum256(b)
	return backup.Digest{Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
}

// moveAllIntoPlace renames every staged data directory to its member's,
// which must be missing or empty; on a failure it undoes what it moved.
func moveAllIntoPlace(staged, members []Member) error {
	type moved struct {
		dir     string
		existed bool
	}
	var done []moved
	rollback := func() {
		for _, d := range done {
			_ = os.RemoveAll(d.dir)
			if d.existed {
				_ = os.Mkdir(d.dir, 0o700)
			}
		}
	}
	for i, m := range members {
		dir := filepath.Clean(m.DataDir)
		existed := false
		if _, err := os.Lstat(dir); err == nil {
			existed = true
			if err := os.Remove(dir); err != nil {
				rollback()
				return fmt.Errorf("%w: data directory %s is not empty", ErrTargetExists, dir)
			}
		}
		if err := os.Rename(staged[i].DataDir, dir); err != nil {
			if existed {
				_ = os.Mkdir(dir, 0o700)
			}
			rollback()
			return fmt.Errorf("move restored data directory into place: %w", err)
		}
		done = append(done, moved{dir, existed})
	}
	for _, d := range done {
		if err := syncDir(filepath.Dir(d.dir)); err != nil {
			rollback()
			return err
		}
	}
	return nil
}
