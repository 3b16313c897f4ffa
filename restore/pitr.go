package restore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	// TolerateUnavailable is as in Query. A time point whose chain ends
	// before the time while a source could not be listed is refused with
	// a *GapError: the segments after it may be on that source.
	TolerateUnavailable bool
	// NearestEarlier, when the point lies in a gap (a *GapError), plans
	// the nearest earlier point that can be restored instead of failing.
	// The plan's Gap then says what was skipped, and the restore's result
	// which revision it restored. By default a point in a gap is refused:
	// a restore never returns another state than the one asked for
	// without being asked to.
	NearestEarlier bool
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

// GapError says that a point lies in a gap of the stored history: the
// revisions From through To are in no delta segment that can be read
// (compacted before the follower read them, written while it was down, or
// on a source that could not be listed). It matches ErrNoChain.
type GapError struct {
	Cluster string
	Point   Point
	// From and To bound the missing revisions, both included; To is zero
	// when no later revision is known.
	From, To int64
	// Nearest is the nearest earlier revision that can be restored; zero
	// when there is none.
	Nearest int64
	// Unavailable is set when a source could not be listed: what is
	// missing may be there.
	Unavailable bool
	// WatchStarted is set when the revisions From through To are stored
	// but were first received when the follower watched again at this
	// time, after the point's time: they were written while it was down,
	// at times no one knows, maybe before the point.
	WatchStarted time.Time
}

// Error names the missing revisions.
func (e *GapError) Error() string {
	var s strings.Builder
	fmt.Fprintf(&s, "%v: cluster %q, %s: ", ErrNoChain, e.Cluster, e.Point)
	if !e.WatchStarted.IsZero() {
		fmt.Fprintf(&s, "revisions %d to %d were written while the follower was down, it watched again at %s: when is unknown",
			e.From, e.To, e.WatchStarted.UTC().Format(time.RFC3339Nano))
	} else if e.To >= e.From {
		fmt.Fprintf(&s, "revisions %d to %d are missing", e.From, e.To)
	} else {
		fmt.Fprintf(&s, "revisions from %d on are missing", e.From)
	}
	if e.Unavailable {
		s.WriteString(" (a source could not be listed)")
	}
	if e.Nearest > 0 {
		fmt.Fprintf(&s, "; the nearest earlier restorable revision is %d", e.Nearest)
	}
	return s.String()
}

// Is reports whether target is ErrNoChain.
func (e *GapError) Is(target error) bool { return target == ErrNoChain }

// PointPlan is what restoring a point reads: a full backup and the delta
// segments after it, in revision order, contiguous.
type PointPlan struct {
	Point
	// Full is the full backup restored first.
	Full Backup
	// Segments follow Full: the first starts at or before the revision
	// after Full's, each starts at or before the revision after the
	// previous one's last, and the last reaches the point. They belong to
	// one chain: one history of the cluster.
	Segments []Backup
	// Gap is set when the point asked for lies in a gap and
	// Point.NearestEarlier planned the nearest earlier point instead:
	// Point.Revision is then that point's revision (for a revision), and
	// Gap.Point the point asked for.
	Gap *GapError
}

// FindPoint finds, on every source, how to restore p: the newest full
// backup at or before the point (that may base a chain, see
// backup.Entry.ChainBase) from which contiguous delta segments of one
// chain reach it. Fulls are tried newest created first, and each only with
// the segments of its own chain (those whose manifest's Chain is the
// full's ID): a plan never mixes two histories, such as the one a cluster
// restored to an earlier revision abandoned and the one written since. A
// full backup that starts no chain (a scheduled one taken while a chain
// ran) is restored alone, at its own revision.
// Errors match ErrNoBackup when no full backup precedes the point, and
// ErrNoChain (a *GapError) when none is followed by segments reaching it.
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
	var fulls, bases, segments []Backup
	seen := map[segmentKey]bool{}
	for _, b := range all {
		m := b.Manifest
		switch {
		case b.Kind == backup.KindDelta:
			if k := (segmentKey{m.Chain, m.FirstRevision, m.LastRevision}); !seen[k] {
				seen[k] = true // the same segment on another source
				segments = append(segments, b)
			}
		case b.ChainBase():
			bases = append(bases, b)
			if p.fullBefore(m) {
				fulls = append(fulls, b)
			}
		}
	}
	if len(fulls) == 0 {
		return nil, fmt.Errorf("%w: no full backup of cluster %q with a known revision before %s", ErrNoBackup, p.Cluster, p)
	}
	slices.SortStableFunc(segments, func(a, b Backup) int {
		return cmpInt(a.Manifest.FirstRevision, b.Manifest.FirstRevision)
	})
	// Newest created first: the same as by revision, except across a
	// cluster restored to an earlier revision, where creation is right.
	slices.SortStableFunc(fulls, func(a, b Backup) int { return b.Manifest.Created.Compare(a.Manifest.Created) })
	chains := groupChains(segments)
	var best *walk
	for _, full := range fulls {
		for _, segs := range chains.forFull(full) {
			w := p.walk(full, segs)
			if w.reached {
				return p.checkDowntime(w)
			}
			if w.restorable(p) && (best == nil || w.betterThan(best, p)) {
				best = &w
			}
		}
	}
	return p.gap(best, bases, segments, listErr != nil)
}

// segmentKey identifies a segment across sources.
type segmentKey struct {
	chain       string
	first, last int64
}

// walk is a run of one chain's segments from a full backup toward a point.
type walk struct {
	full     Backup
	segments []Backup
	// end is the last revision reached, ended when its data was stored.
	end     int64
	ended   time.Time
	reached bool
}

// restorable reports whether a restore can stop at the walk's end: for a
// revision, the end must be known exactly (past the full's upper bound).
func (w walk) restorable(p Point) bool {
	return p.Revision == 0 || w.end >= w.full.Manifest.Etcd.Revision.High
}

// betterThan reports whether w is nearer the point than o.
func (w walk) betterThan(o *walk, p Point) bool {
	if p.Revision > 0 {
		return w.end > o.end
	}
	return w.ended.After(o.ended)
}

// chainSet is the segments of each chain, in revision order, and when each
// chain's first segment was stored.
type chainSet struct {
	segments map[string][]Backup
	started  map[string]time.Time
}

func groupChains(segments []Backup) chainSet {
	cs := chainSet{segments: map[string][]Backup{}, started: map[string]time.Time{}}
	for _, s := range segments {
		c := s.Manifest.Chain
		cs.segments[c] = append(cs.segments[c], s)
		if t, ok := cs.started[c]; !ok || s.Manifest.Created.Before(t) {
			cs.started[c] = s.Manifest.Created
		}
	}
	return cs
}

// forFull returns the segments that may continue full: its own chain's
// (those whose manifest names full as their chain) and, for a synthetic
// full backup, those of the chain it was compacted from
// (backup.Entry.Continues), and no other. A chain started from an older
// full may hold, past this full's revision, the same revisions of another
// history (a cluster restored to an earlier revision and followed again):
// replaying them on this full would restore a state that never existed.
// Only the segments of a chain the full holds the history of are proven
// to continue it.
//
// A segment of another cluster than the full's (both IDs known: a
// follower that continued a chain with another cluster's revisions) ends
// the chain there: the point past it is refused as a gap (ErrNoChain), as
// for the segments of another chain.
func (cs chainSet) forFull(full Backup) [][]Backup {
	var segs []Backup
	for chain, s := range cs.segments {
		if full.Continues(chain) {
			segs = append(segs, s...)
		}
	}
	slices.SortStableFunc(segs, func(a, b Backup) int {
		return cmpInt(a.Manifest.FirstRevision, b.Manifest.FirstRevision)
	})
	id := full.Manifest.Etcd.ClusterID
	for i, s := range segs {
		if other := s.Manifest.Etcd.ClusterID; id != "" && other != "" && other != id {
			return [][]Backup{segs[:i]}
		}
	}
	return [][]Backup{segs}
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
	return !completedAt(m).After(p.Time)
}

func completedAt(m *backup.Manifest) time.Time {
	if m.Completed.IsZero() {
		return m.Created
	}
	return m.Completed
}

// walk follows segments, one chain's, from full toward the point. Segments
// may overlap (replay skips what it applied); they may not leave a gap.
// A time is reached by a segment stored after it: its revisions reach past
// the time.
func (p Point) walk(full Backup, segments []Backup) walk {
	w := walk{full: full, end: full.Manifest.Etcd.Revision.Low, ended: completedAt(full.Manifest)}
	next := 0
	for {
		if p.Revision > 0 && w.end >= p.Revision {
			w.reached = true
			return w
		}
		if p.Revision == 0 && len(w.segments) > 0 && w.ended.After(p.Time) {
			w.reached = true
			return w
		}
		// segments are in first-revision order: the ones that may follow
		// end come next, and those passed over never serve later (end only
		// grows, past the best one's last revision).
		best := -1
		for ; next < len(segments) && segments[next].Manifest.FirstRevision <= w.end+1; next++ {
			m := segments[next].Manifest
			if m.LastRevision > w.end && (best < 0 || m.LastRevision > segments[best].Manifest.LastRevision) {
				best = next
			}
		}
		if best < 0 {
			return w
		}
		w.segments = append(w.segments, segments[best])
		w.end = segments[best].Manifest.LastRevision
		w.ended = segments[best].Manifest.Created
	}
}

// checkDowntime plans w, which reached the time point p, unless p falls
// while the follower was down: after a segment was stored and before the
// next one's watch started (backup.Manifest.WatchStarted). The revisions
// that watch received first were written at unknown times before it
// started, maybe before the point: a *GapError, or with p.NearestEarlier
// the walk up to that segment.
func (p Point) checkDowntime(w walk) (*PointPlan, error) {
	plan := &PointPlan{Point: p, Full: w.full, Segments: w.segments}
	if p.Revision > 0 {
		return plan, nil
	}
	end, ended := w.full.Manifest.Etcd.Revision.Low, completedAt(w.full.Manifest)
	for i, s := range w.segments {
		m := s.Manifest
		if ws := m.WatchStarted; ws.After(p.Time) && !ended.After(p.Time) {
			e := &GapError{Cluster: p.Cluster, Point: p, From: end + 1, To: m.LastRevision, Nearest: end, WatchStarted: ws}
			if !p.NearestEarlier {
				return nil, e
			}
			plan.Segments, plan.Gap = w.segments[:i], e
			return plan, nil
		}
		end, ended = max(end, m.LastRevision), m.Created
	}
	return plan, nil
}

// gap decides a point no walk reached. A time after the end of the
// nearest walk is restorable when nothing stored after that end holds a
// later revision and every source could be listed: the history known ends
// there. Otherwise the point is in a gap, refused unless p.NearestEarlier.
func (p Point) gap(best *walk, bases, segments []Backup, unavailable bool) (*PointPlan, error) {
	e := &GapError{Cluster: p.Cluster, Point: p, Unavailable: unavailable}
	if best == nil {
		e.From = 1
		for _, b := range bases {
			if p.fullBefore(b.Manifest) {
				e.From = max(e.From, b.Manifest.Etcd.Revision.Low+1)
			}
		}
	} else {
		e.From, e.Nearest = best.end+1, best.end
	}
	later := false
	note := func(next int64) {
		later = true
		if p.Revision > 0 {
			next = min(next, p.Revision)
		}
		if e.To == 0 || next < e.To {
			e.To = next
		}
	}
	for _, s := range segments {
		m := s.Manifest
		if m.LastRevision >= e.From && (best == nil || m.Created.After(best.ended)) {
			note(max(m.FirstRevision-1, e.From))
		}
	}
	for _, b := range bases {
		m := b.Manifest
		if m.Etcd.Revision.Low >= e.From && (best == nil || m.Created.After(best.ended)) {
			note(max(m.Etcd.Revision.Low, e.From))
		}
	}
	if p.Revision > 0 && !later {
		e.To = p.Revision
	}
	if best != nil && p.Revision == 0 && !later && !unavailable {
		return &PointPlan{Point: p, Full: best.full, Segments: best.segments}, nil
	}
	if best == nil || !p.NearestEarlier {
		return nil, e
	}
	plan := &PointPlan{Point: p, Full: best.full, Segments: best.segments, Gap: e}
	if p.Revision > 0 {
		plan.Revision = best.end
	}
	return plan, nil
}

// PointResult describes a restored point.
type PointResult struct {
	RestoredMember
	// FullRevision is the exact revision of the restored full backup;
	// Revision the member's revision after replay: the point's revision,
	// or for a time the last revision at or before it (with a plan's Gap,
	// the nearest earlier point's). A revision bump raises what the member
	// serves to Revision+RevisionBump.
	FullRevision, Revision int64
	// RevisionBump is the bump applied after replay (Member.RevisionBump).
	RevisionBump int64
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
// m.DataDir at the end: a failure leaves no data directory.
//
// With m.RevisionBump, once the point is reached the store's revision is
// raised by that much and marked compacted, as etcdutl snapshot restore
// does with --bump-revision and --mark-compacted: the member serves the
// point's keys at revision Revision+RevisionBump, and a watch or read
// from an older revision fails as compacted. Kubernetes' restore guidance
// asks for both, so that watchers and informers never see revisions go
// backwards, and a follower of the restored cluster starts a new chain
// instead of resuming the old one.
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
	bump := members[0].RevisionBump
	for _, m := range members {
		if m.RevisionBump != bump {
			return nil, errors.New("restore of a point: every member needs the same revision bump")
		}
		if bump > math.MaxInt64/2 {
			return nil, fmt.Errorf("restore of a point: revision bump %d is too large", bump)
		}
		if err := checkDataDir(m.DataDir); err != nil {
			return nil, err
		}
	}
	for _, s := range plan.Segments {
		unpin, err := r.pin(ctx, s)
		if err != nil {
			return nil, err
		}
		defer unpin()
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
		staged[i].RevisionBump = 0 // applied after replay
	}
	restored, err := restoreFull(staged)
	if err != nil {
		return nil, err
	}
	out := make([]PointResult, len(members))
	for i := range staged {
		out[i].RestoredMember = restored[i]
		if err := r.replay(ctx, plan, staged[i].DataDir, int64(bump), false, &out[i]); err != nil {

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

// replay applies plan's segments to the database in dataDir, then bumps
// its revision by bump (see replayer.bump).
func (r *Restorer) replay(ctx context.Context, plan *PointPlan, dataDir string, bump int64, settle bool, res *PointResult) (err error) {
	rp, err := openReplay(dataDir, zapslog.New(r.Logger))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, rp.close(bump)) }()
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
	res.Revision, res.Revisions, res.Events, res.RevisionBump = rp.rev, rp.revisions, rp.events, bump
	res.Replay = r.now().Sub(started)
	if settle {
		return rp.settle()
	}
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
