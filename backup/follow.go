package backup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defaults of the Follower's bounds.
const (
	DefaultFlushInterval      = time.Second
	DefaultMaxSegmentBytes    = 8 << 20
	DefaultFinalCommitTimeout = 30 * time.Second
	DefaultSlowStore          = 5 * time.Second
	// DefaultFullName is the backup name of the full backups a Follower
	// takes.
	DefaultFullName = "full"
)

// Follower continuously backs up one etcd cluster: it watches every key
// from the revision of a full backup onward and stores the events, grouped
// by revision, as delta segments next to the full backups. A full backup
// and the contiguous segments after it form a chain, from which
// restore.PointInTime restores any revision.
//
//	full backup (revision L) -> watch from L+1 -> revisions -> segment (1 s or 8 MiB)
//	   -> compress, encrypt (the Pipeline's codec) -> every target -> manifest (commit)
//
// A segment becomes visible only when its manifest is committed, as a full
// backup does. Segments of a chain are contiguous: each starts at the
// revision after the previous one's last. The follower holds at most one
// segment in memory. While a segment is stored, etcd's client buffers the
// events that arrive (what the cluster writes in that time); when a store
// fails (a destination is down), the follower cancels the watch at once,
// retries, and watches again from the segment's end once it is stored, so
// memory does not grow with the length of an outage; a store slower than
// SlowStore cancels the watch the same way. Segments are cut at
// MaxSegmentBytes between revisions, inside a watch response too.
//
// The follower asks etcd its revision and cluster ID before each watch and
// checks every response: a revision below what it committed, or another
// cluster ID (a cluster restored to an earlier revision without a bump,
// or replaced), starts a new chain from a new full backup (ChainRewound),
// so that no chain holds two histories. Segments record the cluster ID.
//
// Run resumes after the last segment committed on the targets, or after
// the newest full backup, and takes a full backup first when there is
// none. When etcd compacted the revisions it needs, it starts a new chain,
// reporting the gap (ChainGap): after the newest full backup that every
// catalog holds and that etcd has not compacted past, or else after a new
// full backup it takes.
//
// Run one follower per cluster and destination (a host holds a lock, as
// the scheduler does for backups): two followers of one cluster would
// store overlapping segments. Restore tolerates overlaps, since it applies
// each revision once, but they cost twice the storage.
type Follower struct {
	// Client watches etcd. It should know every member's endpoint, so that
	// the watch fails over. Required.
	Client *clientv3.Client
	// Pipeline takes the full backups. Its Compression, Encryption, Logger
	// and Now also apply to segments. Required.
	Pipeline *Pipeline
	// Cluster names the cluster. Required.
	Cluster string
	// Targets are the destinations to write to; see Request.Targets. A
	// segment is committed when every target holds it, and a failing
	// target is retried until it succeeds: one target that stays down
	// stops the chain on all of them (SegmentFailed events say which).
	// Give destinations that must progress independently a follower each.
	Targets []Target
	// Catalogs read back what the targets hold, to resume: the follower
	// starts after the last revision committed on all of them. Usually one
	// per target (a destination is both). Required.
	Catalogs []Catalog
	// FullName is the backup name of the full backups the follower takes;
	// empty means DefaultFullName.
	FullName string
	// FlushInterval bounds how long a revision waits in memory before its
	// segment is stored; zero means DefaultFlushInterval.
	FlushInterval time.Duration
	// MaxSegmentBytes bounds a segment's size before encoding; zero means
	// DefaultMaxSegmentBytes.
	MaxSegmentBytes int
	// FinalCommitTimeout bounds storing the last segment once Run's context
	// ends; zero means DefaultFinalCommitTimeout.
	FinalCommitTimeout time.Duration
	// SlowStore bounds how long the watch stays open while a segment is
	// stored: past it, the watch is cancelled (etcd's client would buffer
	// what the cluster writes meanwhile, without bound) and opened again
	// from the segment's end once it is stored. Memory is then bounded
	// under a slow destination as under a failing one. Zero means
	// DefaultSlowStore.
	SlowStore time.Duration
	// RetryInterval is the first wait after a failed store or watch; it
	// doubles up to ten times as long. Zero means one second.
	RetryInterval time.Duration
	// Observer receives the follower's events; nil means none.
	Observer FollowObserver
}

// FollowEventKind says what happened to a follower.
type FollowEventKind string

// The events of a follower.
const (
	// ChainStarted: a new chain starts after the full backup Event.Chain.
	ChainStarted FollowEventKind = "ChainStarted"
	// ChainResumed: the follower resumes an existing chain at Revision.
	ChainResumed FollowEventKind = "ChainResumed"
	// SegmentCommitted: a segment is stored on every target
	// (Event.Manifests).
	SegmentCommitted FollowEventKind = "SegmentCommitted"
	// SegmentFailed: an attempt to store a segment on Event.Destination
	// failed (Event.Err); it is retried.
	SegmentFailed FollowEventKind = "SegmentFailed"
	// ChainGap: etcd compacted Revision before the follower read it. The
	// revisions from Revision to the next full backup cannot be restored;
	// a new chain starts.
	ChainGap FollowEventKind = "ChainGap"
	// WatchRestarted: the watch broke (Event.Err) and resumes at Revision.
	WatchRestarted FollowEventKind = "WatchRestarted"
	// ChainRewound: etcd's revision is below what the follower committed,
	// or its cluster ID changed (Event.Err): the cluster was restored to
	// an earlier revision without a revision bump, or replaced. Its
	// revisions from there on are another history than the chain's: a
	// new chain starts, from a new full backup.
	ChainRewound FollowEventKind = "ChainRewound"
)

// FollowEvent is one thing that happened to a follower.
type FollowEvent struct {
	Kind    FollowEventKind
	Time    time.Time
	Cluster string
	// Chain is the ID of the full backup the current chain started from.
	Chain string
	// Revision is the revision the event is about: the resume point, the
	// first revision lost to compaction.
	Revision int64
	// HeadRevision is etcd's revision as last seen, and Committed the last
	// revision stored on every target: their difference is the lag.
	HeadRevision, Committed int64
	// ChainLength is the number of segments of the chain so far.
	ChainLength int64
	// Lag is, for SegmentCommitted, how long the revisions of the segment
	// and those still uncommitted after it were known to exist before
	// being committed: from the first response or progress notification
	// of etcd that showed a revision at or past them (or the reception of
	// the segment's first revision, when later) to now. A follower
	// catching up far behind reads the time it has been behind, not the
	// time one segment took.
	Lag         time.Duration
	Destination string
	// Manifests are the committed manifests of a segment, one per target.
	Manifests []*Manifest
	// RawBytes and StoredBytes are a segment's sizes; Events and
	// Revisions what it holds.
	RawBytes, StoredBytes, Events, Revisions int64
	Err                                      error
}

// FollowObserver receives a follower's events, synchronously; ObserveFollow
// must return quickly. It may be called concurrently for SegmentFailed
// events of different destinations.
type FollowObserver interface {
	ObserveFollow(FollowEvent)
}

// FollowObserverFunc adapts a function to a FollowObserver.
type FollowObserverFunc func(FollowEvent)

// ObserveFollow calls f(e).
func (f FollowObserverFunc) ObserveFollow(e FollowEvent) { f(e) }

// ChainBase reports whether e may base a chain of delta segments: a full
// backup whose revision bounds are both known. A full backup stored when
// the member could not be asked its revision after the snapshot (High is
// zero) holds some revision at or after Low, no one knows which: a restore
// point between Low and the real revision would be claimed and not held.
// The follower resumes and starts chains only from such entries,
// retention picks its window's base among them, and restore
// (restore.FindPoint) starts a point's replay only from them.
func (e Entry) ChainBase() bool {
	if e.Kind != KindBackup || e.Manifest == nil || e.Manifest.IsDelta() || e.Manifest.IsKeysJSON() {
		return false
	}
	r := e.Manifest.Etcd.Revision
	return r.Low > 0 && r.High >= r.Low
}

// Continues reports whether the delta segments of chain may continue from
// e, a full backup that may base a chain (ChainBase): those of the chain
// e started (chain is e's ID) and, for a synthetic full backup, those of
// the chain it was compacted from (SyntheticInfo.Chain), which hold the
// same history after its revision. Restore (restore.FindPoint) replays a
// full backup only with such segments, so that a plan never mixes two
// histories, and retention keeps them together.
func (e Entry) Continues(chain string) bool {
	if !e.ChainBase() || chain == "" {
		return false
	}
	return e.ID == chain || e.Manifest.Synthetic != nil && e.Manifest.Synthetic.Chain == chain
}

// ErrSlowStore is reported (wrapped in WatchRestarted events) when storing
// a segment took longer than Follower.SlowStore: the watch was cancelled
// meanwhile, and resumes after the segment.
var ErrSlowStore = errors.New("slow segment store")

// ErrRewound is reported (wrapped in ChainRewound events) when etcd's
// revision went back below what a follower committed, or its cluster ID
// changed.
var ErrRewound = errors.New("etcd's history is not the chain's")

// ErrCompacted is reported (wrapped in ChainGap events) when the revision a
// follower needs was compacted.
var ErrCompacted = rpctypes.ErrCompacted

func (f *Follower) validate() error {
	if f.Client == nil {
		return errors.New("follower has no etcd client")
	}
	if f.Pipeline == nil {
		return errors.New("follower has no pipeline")
	}
	if len(f.Catalogs) == 0 {
		return errors.New("follower has no catalog to resume from")
	}
	req := Request{Cluster: f.Cluster, Name: f.fullName(), Scheduled: true, Targets: f.Targets}
	if err := req.Validate(); err != nil {
		return err
	}
	if f.FlushInterval < 0 || f.MaxSegmentBytes < 0 || f.FinalCommitTimeout < 0 || f.RetryInterval < 0 || f.SlowStore < 0 {
		return errors.New("follower bounds may not be negative")
	}
	return nil
}

func (f *Follower) fullName() string {
	if f.FullName != "" {
		return f.FullName
	}
	return DefaultFullName
}

func (f *Follower) flushInterval() time.Duration {
	if f.FlushInterval > 0 {
		return f.FlushInterval
	}
	return DefaultFlushInterval
}

func (f *Follower) maxSegmentBytes() int {
	if f.MaxSegmentBytes > 0 {
		return f.MaxSegmentBytes
	}
	return DefaultMaxSegmentBytes
}

func (f *Follower) retry() retryPolicy {
	first := f.RetryInterval
	if first <= 0 {
		first = time.Second
	}
	return retryPolicy{first: first, max: 10 * first}
}

func (f *Follower) logger() *slog.Logger { return f.Pipeline.logger() }

// Run follows the cluster until ctx ends, then stores the segment it holds
// (within FinalCommitTimeout) and returns nil, or the error of that last
// store. Other errors (invalid configuration, no full backup possible) end
// it early.
func (f *Follower) Run(ctx context.Context) error {
	if err := f.validate(); err != nil {
		return err
	}
	codec, err := newSegmentCodec(f.Cluster, f.Pipeline)
	if err != nil {
		return err
	}
	st := &followState{f: f, codec: codec, leases: map[int64]bool{}}
	st.builder = newSegmentBuilder()
	next, chain, length, at, err := f.resume(ctx)
	if err != nil {
		return err
	}
	var clusterID uint64
	if at != nil {
		clusterID, _ = strconv.ParseUint(at.Etcd.ClusterID, 16, 64)
		st.lastPut = at.LastPut
	}
	if next == 0 {
		if next, chain, st.held, err = f.takeFull(ctx); err != nil {
			return err
		}
		f.event(FollowEvent{Kind: ChainStarted, Chain: chain, Revision: next})
	} else {
		st.chainLength = length
		f.event(FollowEvent{Kind: ChainResumed, Chain: chain, Revision: next, ChainLength: length})
	}
	st.next, st.chain, st.committed, st.clusterID = next, chain, next-1, clusterID
	f.logger().Info("follower started", "cluster", f.Cluster, "chain", chain, "revision", next)
	for {
		st.watchStarted = f.Pipeline.now()
		err := st.drainHeld(ctx)
		if err == nil {
			err = st.checkHistory(ctx)
		}
		if err == nil {
			err = st.watch(ctx)
		}
		switch {
		case ctx.Err() != nil:
			return st.finalFlush(ctx)
		case errors.Is(err, ErrRewound):
			f.event(FollowEvent{Kind: ChainRewound, Chain: st.chain, Revision: st.next, HeadRevision: st.head, Committed: st.committed, Err: err})
			f.logger().Warn("etcd's history changed: starting a new chain", "cluster", f.Cluster, "error", err)
			st.storeAbandoned(ctx)
			next, chain, held, ferr := f.takeFull(ctx)
			if ferr != nil {
				if ctx.Err() != nil {
					return nil
				}
				return ferr
			}
			st.restart(next, chain)
			st.held = held
			f.event(FollowEvent{Kind: ChainStarted, Chain: chain, Revision: next})
		case errors.Is(err, rpctypes.ErrCompacted):
			f.event(FollowEvent{Kind: ChainGap, Chain: st.chain, Revision: st.next, Err: err})
			f.logger().Warn("follower fell behind compaction: starting a new chain", "cluster", f.Cluster, "revision", st.next)
			st.storeAbandoned(ctx)
			next, chain, held, ferr := f.newChain(ctx, st.compacted)
			if ferr != nil {
				if ctx.Err() != nil {
					return nil
				}
				return ferr
			}
			st.restart(next, chain)
			st.held = held
			f.event(FollowEvent{Kind: ChainStarted, Chain: chain, Revision: next})
		case err != nil:
			f.event(FollowEvent{Kind: WatchRestarted, Chain: st.chain, Revision: st.next, Err: err})
			f.logger().Warn("watch broke, resuming", "cluster", f.Cluster, "revision", st.next, "error", err)
			if werr := f.retry().wait(ctx, 1); werr != nil {
				return st.finalFlush(ctx)
			}
		}
	}
}

// newChain returns where a new chain starts once etcd compacted up to
// compacted: after the newest full backup on every catalog whose revision
// etcd still has the events after, or else after a new full backup.
func (f *Follower) newChain(ctx context.Context, compacted int64) (next int64, chain string, _ []clientv3.WatchResponse, err error) {
	var candidate *Manifest
	held := map[string]int{}
	for _, c := range f.Catalogs {
		entries, err := ListBackups(ctx, c, f.Cluster)
		if err != nil {
			return 0, "", nil, fmt.Errorf("find a full backup to start a chain: %w", err)
		}
		for _, e := range entries {
			if e.ChainBase() && e.Manifest.Etcd.Revision.Low >= compacted && compacted > 0 {
				held[e.ID]++
				if candidate == nil || e.Manifest.Etcd.Revision.Low > candidate.Etcd.Revision.Low {
					candidate = e.Manifest
				}
			}
		}
	}
	if candidate != nil && held[candidate.ID] == len(f.Catalogs) {
		return candidate.Etcd.Revision.Low + 1, candidate.ID, nil, nil
	}
	return f.takeFull(ctx)
}

// maxUnboundedFulls bounds the full backups takeFull takes in a row whose
// upper revision stays unknown, which may base no chain.
const maxUnboundedFulls = 3

// takeFull takes a full backup and returns the revision to watch from. A
// full backup of the same name in the same second (IDs have a resolution
// of a second) is retried in the next. A full backup whose revision could
// not be bounded (see Entry.ChainBase) starts no chain: another is taken
// after the retry interval, at most maxUnboundedFulls in all, then Run
// fails rather than fill the destination.
//
// A watch opens before the full backup starts, and held returns what it
// received while the backup was taken, uploaded and committed (see
// prewatch): a cluster that compacts more often than a full backup takes
// still leaves the chain its first revisions.
func (f *Follower) takeFull(ctx context.Context) (next int64, chain string, held []clientv3.WatchResponse, err error) {
	req := Request{Cluster: f.Cluster, Name: f.fullName(), Scheduled: true, Targets: f.Targets}
	unbounded := 0
	for attempt := 1; ; attempt++ {
		pre := f.startPrewatch(ctx)
		res, err := f.Pipeline.Run(ctx, req)
		held := pre.stop()
		switch {
		case err == nil && res.Snapshot.RevisionLow > 0 && res.Snapshot.RevisionHigh >= res.Snapshot.RevisionLow:
			if pre == nil || pre.from > res.Snapshot.RevisionLow+1 {
				held = nil // it started after the full's revision (a member that lagged): a gap
			}
			return res.Snapshot.RevisionLow + 1, res.ID, held, nil
		case err == nil:
			unbounded++
			if unbounded == maxUnboundedFulls {
				return 0, "", nil, fmt.Errorf("full backup to start a chain: %d full backups in a row without a known revision (the last %s)", unbounded, res.ID)
			}
			f.logger().Warn("full backup has no known revision, it cannot start a chain: taking another",
				"cluster", f.Cluster, "backup", res.ID)
			if err := f.retry().wait(ctx, unbounded); err != nil {
				return 0, "", nil, err
			}
			continue
		case !errors.Is(err, ErrBackupExists) || attempt == 3:
			return 0, "", nil, fmt.Errorf("full backup to start a chain: %w", err)
		}
		if err := (retryPolicy{first: time.Second, max: time.Second}).wait(ctx, 1); err != nil {
			return 0, "", nil, err
		}
	}
}

// maxHeldBytes bounds what a prewatch holds while a full backup is taken;
// past it, the prewatch gives up and the chain's watch starts after the
// full backup commits, as without one.
const maxHeldBytes = 64 << 20

// prewatch watches every key from etcd's revision before a full backup,
// holding the responses in memory, up to maxHeldBytes.
type prewatch struct {
	from   int64 // the first revision watched
	cancel context.CancelFunc
	done   chan struct{}
	held   []clientv3.WatchResponse
	failed bool
}

// startPrewatch opens a prewatch, or returns nil when etcd cannot be asked
// its revision.
func (f *Follower) startPrewatch(ctx context.Context) *prewatch {
	resp, err := f.Client.Get(clientv3.WithRequireLeader(ctx), "\x00", clientv3.WithCountOnly())
	if err != nil {
		return nil
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch := f.Client.Watch(wctx, "", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	p := &prewatch{from: resp.Header.Revision + 1, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		size := 0
		for wr := range wch {
			if p.failed {
				continue // drain until the channel closes
			}
			for _, ev := range wr.Events {
				size += len(ev.Kv.Key) + len(ev.Kv.Value) + 64
			}
			if wr.CompactRevision != 0 || wr.Err() != nil || size > maxHeldBytes {
				p.failed, p.held = true, nil
				cancel()
				continue
			}
			p.held = append(p.held, wr)
		}
	}()
	return p
}

// stop ends the prewatch and returns what it held, from its start without
// a gap; nil when it failed.
func (p *prewatch) stop() []clientv3.WatchResponse {
	if p == nil {
		return nil
	}
	p.cancel()
	<-p.done
	if p.failed {
		return nil
	}
	return p.held
}

// resume returns where to start: after the last segment, or after the
// newest full backup, on every catalog; zero when a catalog has neither.
// length is the number of segments of the chain on the first catalog, and
// at the manifest of the resume point (its cluster ID and last put are
// checked against etcd's).
func (f *Follower) resume(ctx context.Context) (next int64, chain string, length int64, at *Manifest, err error) {
	for i, c := range f.Catalogs {
		entries, err := ListBackups(ctx, c, f.Cluster)
		if err != nil {
			return 0, "", 0, nil, fmt.Errorf("find where to resume: %w", err)
		}
		n, ch, m := resumePoint(entries)
		if n == 0 {
			return 0, "", 0, nil, nil
		}
		if next == 0 || n < next {
			next, chain, at = n, ch, m
		}
		if i == 0 {
			for _, e := range entries {
				if e.Kind == KindDelta && e.Manifest.Chain == ch {
					length++
				}
			}
		}
	}
	return next, chain, length, at, nil
}

// resumePoint is where a follower resumes on one catalog's entries: after
// the last segment, else after the newest full backup with a known
// revision.
func resumePoint(entries []Entry) (next int64, chain string, at *Manifest) {
	var last, full *Manifest
	for _, e := range entries {
		m := e.Manifest
		switch {
		case e.Kind == KindDelta:
			if last == nil || m.LastRevision > last.LastRevision {
				last = m
			}
		case e.ChainBase():
			full = m // entries are ordered by creation
		}
	}
	switch {
	case last != nil:
		return last.LastRevision + 1, last.Chain, last
	case full != nil:
		return full.Etcd.Revision.Low + 1, full.ID, full
	}
	return 0, "", nil
}

func (f *Follower) event(e FollowEvent) {
	if f.Observer == nil {
		return
	}
	e.Time = f.Pipeline.now()
	e.Cluster = f.Cluster
	f.Observer.ObserveFollow(e)
}

// followState is the state of a running follower.
type followState struct {
	f       *Follower
	codec   *segmentCodec
	builder *segmentBuilder
	// next is the next revision to read; committed the last one stored.
	next, committed int64
	head            int64
	// heads records when each head revision was first seen, in
	// increasing order, from the first one past committed: the lag.
	heads       []headMark
	chain       string
	chainLength int64
	compacted   int64  // etcd's compaction revision, when the watch met it
	clusterID   uint64 // etcd's cluster ID, recorded in segments
	// lastPut is the last put the chain committed (see Manifest.LastPut),
	// nil when unknown.
	lastPut *PutMark
	// held is what a prewatch received while the chain's full backup was
	// taken, to receive before watching.
	held          []clientv3.WatchResponse
	firstReceived time.Time // of the segment's first revision
	// watchStarted is when the running watch started (before its held
	// revisions are received); segmentWatchStarted is watchStarted when
	// the segment's first revision was received (Manifest.WatchStarted).
	watchStarted, segmentWatchStarted time.Time
	leases                            map[int64]bool
	// stopWatch cancels the running watch: called when a store fails, so
	// that etcd's client stops buffering events while the store retries.
	stopWatch context.CancelFunc
}

// drainHeld receives what a prewatch held while the chain's full backup
// was taken: the revisions after the full backup's, up to where the
// prewatch stopped. The watch then continues from there.
func (st *followState) drainHeld(ctx context.Context) error {
	held := st.held
	st.held = nil
	for _, wr := range held {
		if n := len(wr.Events); n == 0 || wr.Events[n-1].Kv.ModRevision < st.next {
			continue
		}
		if err := st.receive(ctx, wr); err != nil {
			if errors.Is(err, errRewatch) {
				return nil
			}
			return err
		}
	}
	return nil
}

// storeAbandoned stores the revisions held for a chain that ends (etcd's
// history changed, or it compacted past the chain): they belong to that
// chain's history, not the next one's. When they cannot be stored within
// FinalCommitTimeout, they are dropped, with a SegmentFailed event.
func (st *followState) storeAbandoned(ctx context.Context) {
	if st.builder.empty() {
		return
	}
	sum := st.builder.sum
	fctx, cancel := context.WithTimeout(ctx, cmpOr(st.f.FinalCommitTimeout, DefaultFinalCommitTimeout))
	defer cancel()
	if _, err := st.flush(fctx); err != nil {
		err = fmt.Errorf("revisions %d..%d of the ended chain dropped: %w", sum.FirstRevision, sum.LastRevision, err)
		st.f.event(FollowEvent{Kind: SegmentFailed, Chain: st.chain, Revision: sum.FirstRevision, Committed: st.committed, Err: err})
		st.f.logger().Warn("revisions held for a chain that ended could not be stored: dropped", "cluster", st.f.Cluster,
			"chain", st.chain, "first_revision", sum.FirstRevision, "last_revision", sum.LastRevision, "error", err)
	}
	st.builder = newSegmentBuilder()
}

// restart makes st follow a new chain from next, with an empty segment:
// what the ended chain held was stored or dropped (storeAbandoned).
func (st *followState) restart(next int64, chain string) {
	st.next, st.chain, st.committed, st.chainLength = next, chain, next-1, 0
	st.builder = newSegmentBuilder()
	st.head, st.clusterID, st.lastPut, st.heads = 0, 0, nil, nil
	st.leases = map[int64]bool{}
}

// headMark is a head revision of etcd and when the follower first saw it
// (a response header, a watch response or a progress notification).
type headMark struct {
	rev  int64
	seen time.Time
}

// maxHeadMarks bounds the head marks kept: past it, two neighbours merge
// into one with the later revision and the earlier time, which can only
// make the lag read longer, never shorter.
const maxHeadMarks = 256

// sawHead records that etcd showed revision rev.
func (st *followState) sawHead(rev int64) {
	if rev <= st.head {
		return
	}
	st.head = rev
	st.heads = append(st.heads, headMark{rev: rev, seen: st.f.Pipeline.now()})
	if len(st.heads) > maxHeadMarks {
		merged := st.heads[:0]
		for i := 0; i < len(st.heads); i += 2 {
			m := st.heads[min(i+1, len(st.heads)-1)]
			m.seen = st.heads[i].seen
			merged = append(merged, m)
		}
		st.heads = merged
	}
}

// uncommittedFor is the lag in time: how long the oldest revision not
// committed has been known to exist, from the first time etcd showed a
// revision at or past it; zero when etcd showed none past committed. A
// follower far behind reads the time it has been behind, however fast
// each segment is stored.
func (st *followState) uncommittedFor() time.Duration {
	i := 0
	for i < len(st.heads) && st.heads[i].rev <= st.committed {
		i++
	}
	st.heads = st.heads[i:]
	if len(st.heads) == 0 {
		return 0
	}
	return st.f.Pipeline.now().Sub(st.heads[0].seen)
}

// checkHistory asks etcd its revision and cluster ID before a watch
// starts: etcd accepts a watch from a revision it has not reached, so a
// cluster restored to an earlier revision would be followed from the
// chain's end, and its revisions up to there lost, without a word.
func (st *followState) checkHistory(ctx context.Context) error {
	resp, err := st.f.Client.Get(clientv3.WithRequireLeader(ctx), "\x00", clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("ask etcd its revision: %w", err)
	}
	if err := st.checkHeader(resp.Header); err != nil {
		return err
	}
	return st.checkLastPut(ctx)
}

// checkLastPut asks etcd for the chain's last committed put at its
// revision: a cluster restored to an earlier revision keeps its cluster ID
// and may have written past the chain's end, which the revision alone does
// not show. When etcd compacted that revision, the key as it is now is
// compared: the same modification revision with other contents, or an
// older one, is another history; a newer one or none proves nothing.
func (st *followState) checkLastPut(ctx context.Context) error {
	m := st.lastPut
	if m == nil {
		return nil
	}
	ctx = clientv3.WithRequireLeader(ctx)
	resp, err := st.f.Client.Get(ctx, string(m.Key), clientv3.WithRev(m.ModRevision))
	compacted := errors.Is(err, rpctypes.ErrCompacted)
	if compacted {
		resp, err = st.f.Client.Get(ctx, string(m.Key))
	}
	if err != nil {
		return fmt.Errorf("ask etcd the chain's last put: %w", err)
	}
	var got *PutMark
	if len(resp.Kvs) > 0 {
		kv := resp.Kvs[0]
		got = newPutMark(&SegmentEvent{Key: kv.Key, Value: kv.Value, ModRevision: kv.ModRevision, CreateRevision: kv.CreateRevision, Version: kv.Version})
	}
	switch {
	case got != nil && got.same(m):
	case compacted && (got == nil || got.ModRevision > m.ModRevision):
		// Changed or deleted since: nothing to compare.
	default:
		return fmt.Errorf("%w: etcd does not hold the put of revision %d the chain committed last", ErrRewound, m.ModRevision)
	}
	return nil
}

// checkHeader compares a response header of etcd with the chain.
func (st *followState) checkHeader(h *etcdserverpb.ResponseHeader) error {
	if h == nil {
		return nil
	}
	if st.clusterID != 0 && h.ClusterId != 0 && h.ClusterId != st.clusterID {
		return fmt.Errorf("%w: cluster ID %s, the chain's is %s", ErrRewound, formatID(h.ClusterId), formatID(st.clusterID))
	}
	if h.Revision < st.committed {
		return fmt.Errorf("%w: etcd is at revision %d, the chain committed %d", ErrRewound, h.Revision, st.committed)
	}
	if st.clusterID == 0 {
		st.clusterID = h.ClusterId
	}
	st.sawHead(h.Revision)
	return nil
}

// watch watches from st.next until the watch ends, a segment had to be
// retried (to drop what the watch buffered meanwhile), or ctx ends.
func (st *followState) watch(ctx context.Context) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// Only while the watch runs: a store after it ended (of what a
	// prewatch held) has no watch to stop, and must not be cut short.
	st.stopWatch = cancel
	defer func() { st.stopWatch = nil }()
	wch := st.f.Client.Watch(wctx, "", clientv3.WithPrefix(), clientv3.WithRev(st.next), clientv3.WithProgressNotify())
	interval := st.f.flushInterval()
	tick := time.NewTicker(max(interval/8, 5*time.Millisecond))
	defer tick.Stop()
	var asked time.Time
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			now := st.f.Pipeline.now()
			switch {
			case !st.builder.empty() && now.Sub(st.firstReceived) >= interval:
				if retried, err := st.flush(ctx); err != nil || retried {
					return err
				}
			case st.builder.empty() && now.Sub(asked) >= interval:
				// Learn etcd's head revision, for the lag.
				asked = now
				_ = st.f.Client.RequestProgress(wctx)
			}
		case wr, ok := <-wch:
			if !ok {
				if err := ctx.Err(); err != nil {
					return err
				}
				return errors.New("watch channel closed")
			}
			if err := st.receive(ctx, wr); err != nil {
				if errors.Is(err, errRewatch) {
					return nil
				}
				return err
			}
		}
	}
}

// receive adds a watch response's revisions to the segment.
func (st *followState) receive(ctx context.Context, wr clientv3.WatchResponse) error {
	if wr.CompactRevision != 0 {
		// What is held is contiguous and valid: store it, then report.
		if _, err := st.flush(ctx); err != nil {
			return err
		}
		st.compacted = wr.CompactRevision
		return fmt.Errorf("%w: revision %d, compacted up to %d", rpctypes.ErrCompacted, st.next, wr.CompactRevision)
	}
	if err := wr.Err(); err != nil {
		return err
	}
	if err := st.checkHeader(wr.Header); err != nil {
		// A member that lags may answer below what another served: only a
		// linearizable read, which waits for the member to catch up,
		// confirms a rewind. Until then, the watch restarts from st.next.
		if err = st.checkHistory(ctx); err != nil {
			// What is held is the chain's history, received before.
			if _, ferr := st.flush(ctx); ferr != nil {
				return ferr
			}
			return err
		}
	}
	now := st.f.Pipeline.now()
	evs := wr.Events
	for len(evs) > 0 {
		rev := evs[0].Kv.ModRevision
		n := 1
		for n < len(evs) && evs[n].Kv.ModRevision == rev {
			n++
		}
		if rev < st.next {
			// Already stored: a watch restarted inside a revision range.
			evs = evs[n:]
			continue
		}
		r := SegmentRevision{Revision: rev, Received: now, Events: toSegment(evs[:n])}
		r.Leases = st.newLeases(ctx, r.Events)
		if err := st.builder.add(r); err != nil {
			return fmt.Errorf("segment: %w", err)
		}
		if st.builder.sum.Revisions == 1 {
			st.firstReceived, st.segmentWatchStarted = now, st.watchStarted
		}
		st.next = rev + 1
		evs = evs[n:]
		// A catching-up watch delivers up to 1,000 revisions in one
		// response: the segment is cut between revisions, inside it.
		if st.builder.size() >= st.f.maxSegmentBytes() {
			if retried, err := st.flush(ctx); err != nil || retried {
				return cmp.Or(err, errRewatch)
			}
		}
	}
	return nil
}

// errRewatch asks watch to return, for Run to watch again from st.next:
// a store failed or was slow, and etcd's client buffered meanwhile.
var errRewatch = errors.New("watch again")

func toSegment(evs []*clientv3.Event) []SegmentEvent {
	out := make([]SegmentEvent, len(evs))
	for i, e := range evs {
		out[i] = segmentEvent((*mvccpb.Event)(e))
	}
	return out
}

// maxKnownLeases bounds the follower's memory of leases it recorded.
const maxKnownLeases = 1 << 16

// newLeases returns the leases of evs not yet recorded, with the TTL etcd
// granted them. A lease etcd no longer knows is recorded with TTL 0.
func (st *followState) newLeases(ctx context.Context, evs []SegmentEvent) []SegmentLease {
	var out []SegmentLease
	for _, ev := range evs {
		id := ev.Lease
		if ev.Delete || id == 0 || st.leases[id] {
			continue
		}
		if len(st.leases) >= maxKnownLeases {
			clear(st.leases)
		}
		st.leases[id] = true
		ttl := int64(0)
		if resp, err := st.f.Client.TimeToLive(ctx, clientv3.LeaseID(id)); err == nil && resp.GrantedTTL > 0 {
			ttl = resp.GrantedTTL
		}
		out = append(out, SegmentLease{ID: id, TTL: ttl})
	}
	return out
}

// flush stores the segment held, if any. retried reports whether a store
// failed at least once: the caller then restarts the watch, dropping what
// etcd's client buffered meanwhile.
func (st *followState) flush(ctx context.Context) (retried bool, err error) {
	if st.builder.empty() {
		return false, nil
	}
	b := st.builder
	raw := b.finish()
	seg, err := st.codec.encode(raw, b.sum, st.chain, st.clusterID)
	if err != nil {
		b.reopen()
		return false, err
	}
	seg.base.LastPut, seg.base.WatchStarted = b.lastPut, st.segmentWatchStarted
	f := st.f
	var failed, slowed atomic.Bool // set by the targets' goroutines, the timer
	stopSlow := func() bool { return false }
	if stop := st.stopWatch; stop != nil {
		stopSlow = time.AfterFunc(cmpOr(f.SlowStore, DefaultSlowStore), func() {
			slowed.Store(true)
			stop()
		}).Stop
	}
	manifests, err := seg.store(ctx, f.Targets, f.Pipeline.now, f.retry(), func(dest string, attempt int, err error) {
		if attempt == 1 && st.stopWatch != nil {
			st.stopWatch() // safe from any goroutine
		}
		failed.Store(true)
		f.event(FollowEvent{Kind: SegmentFailed, Chain: st.chain, Revision: b.sum.FirstRevision, Destination: dest, Err: err,
			HeadRevision: max(st.head, b.sum.LastRevision), Committed: st.committed})
		f.logger().Warn("segment store failed, retrying", "cluster", f.Cluster, "destination", dest,
			"first_revision", b.sum.FirstRevision, "attempt", attempt, "error", err)
	})
	stopSlow()
	if slowed.Load() && !failed.Load() {
		serr := fmt.Errorf("%w: storing the segment took longer than %s", ErrSlowStore, cmpOr(f.SlowStore, DefaultSlowStore))
		f.event(FollowEvent{Kind: WatchRestarted, Chain: st.chain, Revision: b.sum.LastRevision + 1, Err: serr})
		f.logger().Warn("segment store was slow: the watch was cancelled, it resumes after the segment", "cluster", f.Cluster,
			"first_revision", b.sum.FirstRevision, "error", serr)
	}
	retried = failed.Load() || slowed.Load()
	if err != nil {
		// Not committed everywhere: the next run resumes before it (a
		// target that has it then holds an overlapping segment, which
		// restore tolerates). The builder keeps its revisions and takes
		// more: the next flush stores them all.
		b.reopen()
		return retried, err
	}
	st.committed = b.sum.LastRevision
	st.lastPut = cmp.Or(b.lastPut, st.lastPut)
	st.chainLength++
	// The lag from the segment's first revision, known since etcd first
	// showed it, to its commit; the oldest revision left uncommitted may
	// have been known longer.
	lag := f.Pipeline.now().Sub(st.firstReceived)
	for _, m := range st.heads {
		if m.rev >= b.sum.FirstRevision {
			lag = max(lag, f.Pipeline.now().Sub(m.seen))
			break
		}
	}
	lag = max(lag, st.uncommittedFor())
	f.event(FollowEvent{Kind: SegmentCommitted, Chain: st.chain, Revision: b.sum.FirstRevision, ChainLength: st.chainLength,
		HeadRevision: max(st.head, st.committed), Committed: st.committed, Lag: lag, Manifests: manifests,
		RawBytes: int64(len(raw)), StoredBytes: int64(len(seg.stored)), Events: b.sum.Events, Revisions: b.sum.Revisions})
	f.logger().Debug("segment committed", "cluster", f.Cluster, "first_revision", b.sum.FirstRevision,
		"last_revision", b.sum.LastRevision, "events", b.sum.Events, "stored_bytes", len(seg.stored))
	st.builder = newSegmentBuilder()
	return retried, nil
}

// finalFlush stores what is held once Run's context ended.
func (st *followState) finalFlush(ctx context.Context) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cmpOr(st.f.FinalCommitTimeout, DefaultFinalCommitTimeout))
	defer cancel()
	if _, err := st.flush(fctx); err != nil {
		return fmt.Errorf("store the last segment: %w", err)
	}
	st.f.logger().Info("follower stopped", "cluster", st.f.Cluster, "committed_revision", st.committed)
	return nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
