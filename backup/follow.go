package backup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/internal/cleanup"
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
// revision after the previous one's last. The follower holds one segment
// being cut, and the backlogs of targets behind (below). While a segment
// is stored it keeps reading the watch, holding at most twice
// MaxSegmentBytes of what arrives (unread, it would wait in gRPC's and
// etcd's buffers, and stall the watch); when no target can store the segment, when what
// arrives passes that bound, or when the store takes longer than
// SlowStore, it cancels the watch and watches again once the segment is
// stored, so memory does not grow with the length of an outage or with
// the slowness of a store. Segments are cut at MaxSegmentBytes between
// revisions, inside a watch response too. A commit whose answer was lost
// (a store that went down, or a link that broke, after it wrote the
// manifest) is in doubt: before its next attempt writes the segment again
// under a name of its own, the target reads back the manifests of the
// attempts in doubt (the newest 8), and takes the one it holds as the
// segment's commit, so that a revision is in a chain once. That read needs
// an Uploader that is a BucketUploader or a Catalog (a destination), or a
// catalog per target, and credentials that may read. Without it, or when
// a manifest lands after the read found nothing, the segment is stored
// twice: the two hold the same revisions and events, restore replays
// them once (restore.FindPoint takes one segment per chain and range),
// and retention deletes both together.
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
// Targets progress independently. A segment is cut and encoded once, and
// each target stores it in its own order, continuing its own chain: the
// follower goes on as soon as one target holds a segment. A target that
// fails falls behind (TargetBehind, SegmentFailed events) and keeps the
// segments it lacks in a backlog of at most MaxBacklogBytes, which it
// stores when it works again (TargetCaughtUp). A target whose backlog no
// longer holds a revision it lacks is lost (TargetLost): once its store
// answers, the follower takes a full backup on it alone and its chain
// starts again after it (TargetRestarted), never with a hole. Only when no
// target can store a segment does the follower stop reading etcd, and it
// resumes from the last revision a target holds. With one catalog per
// target (in the same order), each target also resumes from its own
// catalog, and the watch from the earliest of them; each target's point
// is checked against etcd as the chain followed is, and a target whose
// catalog holds no chain, a chain of another history, or one whose next
// revisions etcd compacted starts lost (TargetLost) while the others go
// on with their chains.
//
// # Recovery
//
// etcd catches a watch up from an old revision on its slow path: every
// 100 ms its unsynced watchers read the whole backlog, from the oldest of
// their revisions to the head, and deliver 1,000 revisions of it, so that
// catching up costs the square of the backlog (about 1,800 revisions/s
// when 300,000 behind). A cluster that writes faster is never caught up.
// So when the follower is more than RecoveryRevisions behind etcd's head
// (checked before each watch: at start and after a destination outage),
// it protects the head first and the past after:
//
//  1. RecoveryStarted: it takes a full backup at once; once committed,
//     the head is protected again, within the time of one full backup
//     whatever the backlog (ChainStarted: a new chain follows from it,
//     with the lag of a new chain);
//  2. meanwhile (and after) the old chain's tail, from its last committed
//     revision to the full backup's upper revision, is caught up in the
//     background on its own watch and stored as segments of the old chain
//     (RecoverySegmentCommitted), each target continuing its own;
//  3. RecoveryDone: the tail reached the full backup's revision on every
//     target (Err nil; a target failing meanwhile retries, and only a
//     lost one, reported as TargetLost, is not waited for; one still
//     failing FinalCommitTimeout after the tail read its last revision
//     is lost then), or ended short of it (Err: etcd compacted it, its
//     history changed, no target could store it, or Run's context
//     ended). The tail reads history at
//     its own pace: each segment waits for every target not lost, so a
//     destination slower than the others, or failing a while, is never
//     lost for its backlog; one still failing FinalCommitTimeout after
//     it began to while another works is lost for the tail (TargetLost
//     on the old chain), and RecoveryDone
//     lists it (Destinations, Err wrapping ErrTailIncomplete): the tail
//     stays recorded, and a follower started again resumes it there. A
//     follower that starts again follows the new chain and resumes the
//     tail the new chain's last segment records (Manifest.Recovery), each
//     target from what its own catalog holds of the old chain
//     (RecoveryStarted on the old chain, then RecoveryDone). A tail that
//     ends short for good is reported once as the gap it leaves (ChainGap on the old chain, then RecoveryDone
//     with Err): a tail etcd compacted meanwhile is reported then, with
//     ErrCompacted, and its revisions stay a gap.
//
// The restore points are: during recovery, every revision of the old
// chain up to its last committed segment (growing as the tail commits)
// and every revision from the new full backup's upper revision on, as the
// new chain commits; the revisions between are refused as a gap
// (restore.ErrNoChain) until the tail holds them. After a complete
// recovery, every revision from the old chain's full backup on. A
// recovery whose full backup fails is reported (RecoveryDone with Err)
// and the follower catches up on its chain as without recovery. One tail
// runs at a time: a follower far behind again while one runs catches up
// on its chain.
//
// Run one follower per cluster (a host holds a lock, as the scheduler
// does for backups): two followers of one cluster would store overlapping
// segments. Restore tolerates overlaps, since it applies each revision
// once, but they cost twice the storage.
type Follower struct {
	// Client watches etcd. It should know every member's endpoint, so that
	// the watch fails over. The follower watches on gRPC streams of its
	// own over Client's connection, not through Client.Watcher: every key
	// of the cluster, as its full backups hold them, even when a host set
	// a Watcher of its own (a namespace's). A stream that breaks (a member
	// stopped) is a WatchRestarted: the follower checks etcd's history and
	// watches again after RetryInterval. Required.
	Client *clientv3.Client
	// Pipeline takes the full backups. Its Compression, Encryption, Logger
	// and Now also apply to segments. Required.
	Pipeline *Pipeline
	// Cluster names the cluster. Required.
	Cluster string
	// Targets are the destinations to write to; see Request.Targets. Each
	// progresses on its own: one that fails does not stop the others.
	Targets []Target
	// Catalogs read back what the targets hold, to resume: the watch
	// starts after the last revision committed on all of them. Usually one
	// per target, in the targets' order (a destination is both): each
	// target then resumes its own chain from its own catalog, and a lost
	// target's catalog is listed before a full backup is taken on it
	// (without one, each try of a lost target is a full backup).
	// Required.
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
	// ends, and how long a recovery's tail waits for a destination that
	// keeps failing it while another works, or once it read its last
	// revision (see RecoveryDone), at least ten times RetryInterval (the
	// longest pause between attempts) and until an attempt failed within
	// it; zero means DefaultFinalCommitTimeout.
	FinalCommitTimeout time.Duration
	// SlowStore bounds how long the watch stays open while a segment is
	// stored: past it, the watch is cancelled and opened again from the
	// segment's end once it is stored. Meanwhile the follower keeps
	// reading the watch (unread, what the cluster writes would wait in
	// gRPC's and etcd's buffers), holding at most twice
	// MaxSegmentBytes of it; past that too the watch is cancelled, and
	// opened again after what is held. Memory is then bounded under a
	// slow destination as under a failing one. Zero means
	// DefaultSlowStore.
	SlowStore time.Duration
	// MaxBacklogBytes bounds the stored bytes of the segments held for a
	// target behind the others; past it, the oldest are dropped and the
	// target, when it lacks them, starts a new chain with a full backup of
	// its own. Zero means DefaultMaxBacklogBytes.
	MaxBacklogBytes int
	// RetryInterval is the first wait after a failed store or watch; it
	// doubles up to ten times as long. Zero means one second.
	RetryInterval time.Duration
	// RecoveryRevisions bounds how far behind etcd's head the follower
	// catches up on the chain it follows: past it (a follower restarted
	// after a long stop, a destination down for minutes), it takes a full
	// backup at once and follows a new chain from it, while the old
	// chain's tail is caught up in the background (see Recovery below).
	// Zero means DefaultRecoveryRevisions; negative never recovers this
	// way (the follower catches up on its chain, however far behind).
	// Nor does it while a tail is recorded, running or kept because
	// destinations lack it (ErrTailIncomplete): the chain's segments
	// record one tail, which a follower started again resumes.
	RecoveryRevisions int64
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
	// SegmentCommitted: a segment is stored on a first target
	// (Event.Manifests holds the targets' manifests so far); targets
	// behind store it from their backlog.
	SegmentCommitted FollowEventKind = "SegmentCommitted"
	// SegmentStored: a segment from Event.Revision is stored on
	// Event.Destination (the first target or, later, one behind);
	// Event.Manifests holds its manifest there (its chain and last
	// revision), Event.StoredBytes its size.
	SegmentStored FollowEventKind = "SegmentStored"
	// SegmentFailed: an attempt to store a segment (or a lost target's
	// full backup) on Event.Destination failed (Event.Err); it is retried.
	// Event.Revision is the first revision the target lacks.
	SegmentFailed FollowEventKind = "SegmentFailed"
	// TargetBehind: Event.Destination failed (Event.Err) and falls behind
	// the others, which go on; it lacks revisions from Event.Revision.
	TargetBehind FollowEventKind = "TargetBehind"
	// TargetLost: Event.Destination lacks revisions from Event.Revision
	// that the follower no longer holds (its backlog passed
	// MaxBacklogBytes, or a new chain's full backup did not reach it): a
	// full backup on it alone will start a new chain there. A target
	// that lost revisions of a recovery's tail reports it with
	// Event.Chain, the tail's chain: it takes no full backup for it, and
	// the tail's revisions from Event.Revision are a gap on
	// Event.Destination alone (RecoveryDone does not wait for it, and
	// lists it in Event.Destinations) until a follower started again
	// resumes the tail there.
	TargetLost FollowEventKind = "TargetLost"
	// TargetRestarted: a full backup on the lost Event.Destination alone
	// starts a new chain there (Event.Chain) at Event.Revision.
	TargetRestarted FollowEventKind = "TargetRestarted"
	// TargetCaughtUp: Event.Destination, behind, holds again every
	// segment the follower cut, up to Event.Committed of Event.Chain.
	TargetCaughtUp FollowEventKind = "TargetCaughtUp"
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
	// revision stored on a target (for the events of one target, on that
	// target): their difference is the lag.
	HeadRevision, Committed int64
	// ChainLength is the number of segments of the chain so far.
	ChainLength int64
	// Lag is, for SegmentCommitted, how long the revisions of the segment
	// and those still uncommitted after it were known to exist before
	// being committed: from the first response or progress notification
	// of etcd that showed a revision at or past them (or the reception of
	// the segment's first revision, when later) to the commit (the store
	// that made the segment held), and to now for those still
	// uncommitted. A follower
	// catching up far behind reads the time it has been behind, not the
	// time one segment took.
	Lag         time.Duration
	Destination string
	// Manifests are the committed manifests of a segment, one per target.
	Manifests []*Manifest
	// RawBytes and StoredBytes are a segment's sizes; Events and
	// Revisions what it holds. For a WatchRestarted event of a watch
	// cancelled because too much arrived while a segment was stored,
	// RawBytes is what the follower held of it.
	RawBytes, StoredBytes, Events, Revisions int64
	// Destinations, for RecoveryDone, are the destinations that lost
	// revisions of the recovery's tail while it ran.
	Destinations []string
	Err          error
}

// FollowObserver receives a follower's events, synchronously; ObserveFollow
// must return quickly. It may be called concurrently: the events of each
// target (SegmentFailed, TargetBehind, TargetLost, TargetRestarted,
// TargetCaughtUp) come from that target's goroutine.
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
	if e.Kind != KindBackup || e.Manifest == nil || e.Manifest.IsDelta() || e.Manifest.IsLogical() {
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
	if f.Client.ActiveConnection() == nil {
		return errors.New("follower's etcd client has no gRPC connection to watch on (make it with clientv3.New)")
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
	if f.FlushInterval < 0 || f.MaxSegmentBytes < 0 || f.FinalCommitTimeout < 0 || f.RetryInterval < 0 || f.SlowStore < 0 || f.MaxBacklogBytes < 0 {
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
	if codec != nil {
		codec.config = f.fullName()
	}
	if err != nil {
		return err
	}
	st := &followState{f: f, codec: codec, leases: map[int64]bool{}}
	st.builder = newSegmentBuilder()
	next, chain, length, at, points, err := f.resume(ctx)
	if err != nil {
		return err
	}
	var clusterID uint64
	if at != nil {
		clusterID, _ = strconv.ParseUint(at.Etcd.ClusterID, 16, 64)
		st.lastPut = at.LastPut
	}
	var missing []string
	if next == 0 {
		start, err := f.takeFull(ctx)
		if err != nil {
			return err
		}
		next, chain, st.held, st.pre, missing, points = start.next, start.chain, start.held, start.pre, start.missing, nil
		f.event(FollowEvent{Kind: ChainStarted, Chain: chain, Revision: next})
	} else {
		st.chainLength = length
		f.event(FollowEvent{Kind: ChainResumed, Chain: chain, Revision: next, ChainLength: length})
	}
	st.next, st.chain, st.committed, st.clusterID = next, chain, next-1, clusterID
	st.targets = f.newFollowTargets(next, chain, points)
	if missing != nil {
		st.targets.restart(next, chain, missing)
	}
	st.targets.start(ctx)
	defer st.targets.stop()
	defer st.endTails() // a recovery's tail stores what it holds too
	f.logger().Info("follower started", "cluster", f.Cluster, "chain", chain, "revision", next)
	st.resumeTail(ctx, at) // of a recovery this follower was stopped in
	for {
		st.watchStarted = f.Pipeline.now()
		err := st.drainHeld(ctx)
		if errors.Is(err, errRewatch) {
			err = nil
		}
		if err == nil {
			err = st.checkHistory(ctx)
		}
		if err == nil && st.farBehind() {
			var started bool
			if started, err = st.recover(ctx); started && err == nil {
				continue // the new chain: what its prewatch held, then its watch
			}
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
			if err := st.startChain(ctx, f.takeFull); err != nil {
				return err
			}
		case errors.Is(err, rpctypes.ErrCompacted):
			f.event(FollowEvent{Kind: ChainGap, Chain: st.chain, Revision: st.next, Err: err})
			f.logger().Warn("follower fell behind compaction: starting a new chain", "cluster", f.Cluster, "revision", st.next)
			compacted := st.compacted
			if err := st.startChain(ctx, func(ctx context.Context) (chainStart, error) { return f.newChain(ctx, compacted) }); err != nil {
				return err
			}
		case err != nil:
			f.event(FollowEvent{Kind: WatchRestarted, Chain: st.chain, Revision: st.next, Err: err})
			f.logger().Warn("watch broke, resuming", "cluster", f.Cluster, "revision", st.next, "error", err)
			// A watch that ran for a while broke (a member restarted):
			// watch again at once (checkHistory waits for etcd to
			// answer); one that broke sooner waits RetryInterval first.
			if f.Pipeline.now().Sub(st.watchStarted) < f.retry().first {
				if werr := f.retry().wait(ctx, 1); werr != nil {
					return st.finalFlush(ctx)
				}
			}
		}
	}
}

// startChain ends the chain followed (storing what it holds, see
// storeAbandoned) and follows the one start returns. It returns nil when
// ctx ended meanwhile.
func (st *followState) startChain(ctx context.Context, start func(context.Context) (chainStart, error)) error {
	st.pre.close()
	st.pre = nil
	st.storeAbandoned(ctx)
	c, err := start(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	st.restart(c)
	st.f.event(FollowEvent{Kind: ChainStarted, Chain: c.chain, Revision: c.next})
	return nil
}

// chainStart is where a chain starts: at next, after the full backup
// chain; held is what a prewatch received while it was taken, pre that
// prewatch, whose watch continues after held (see followState.openWatch),
// and missing the targets it did not reach.
type chainStart struct {
	next    int64
	chain   string
	high    int64 // the full backup's upper revision, when taken
	held    []clientv3.WatchResponse
	pre     *prewatch
	missing []string
}

// newChain returns where a new chain starts once etcd compacted up to
// compacted: after the newest full backup on every catalog whose revision
// etcd still has the events after, or else after a new full backup (also
// when a catalog cannot be listed: the full backup then starts the chain
// on the targets it reaches, and the others catch up on their own).
func (f *Follower) newChain(ctx context.Context, compacted int64) (chainStart, error) {
	var candidate *Manifest
	held := map[string]int{}
	for _, c := range f.Catalogs {
		entries, err := ListBackups(ctx, c, f.Cluster)
		if err != nil {
			if ctx.Err() != nil {
				return chainStart{}, ctx.Err()
			}
			f.logger().Warn("a catalog cannot be listed: a new full backup starts the chain", "cluster", f.Cluster, "error", err)
			return f.takeFull(ctx)
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
		return chainStart{next: candidate.Etcd.Revision.Low + 1, chain: candidate.ID}, nil
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
// still leaves the chain its first revisions, and its watch, still open,
// becomes the chain's: no watch has to start from a revision etcd may
// have compacted meanwhile.
//
// A full backup that reached some targets starts the chain; the others
// are returned as missing (they catch up with a full backup of their own).
func (f *Follower) takeFull(ctx context.Context) (chainStart, error) { return f.takeFullOf(ctx, "") }

// takeFullOf is takeFull with recoveryOf, for a recovery's full backup,
// naming the chain whose tail is caught up after it (Manifest.Recovery).
func (f *Follower) takeFullOf(ctx context.Context, recoveryOf string) (chainStart, error) {
	req := Request{Cluster: f.Cluster, Name: f.fullName(), Scheduled: true, Targets: f.Targets, recoveryOf: recoveryOf}
	unbounded := 0
	for attempt := 1; ; attempt++ {
		res, pre, held, err := f.fullInSlot(ctx, req)
		reached := err == nil || (res != nil && len(res.Succeeded()) > 0)
		bounded := reached && res.Snapshot.RevisionLow > 0 && res.Snapshot.RevisionHigh >= res.Snapshot.RevisionLow
		if !bounded || pre == nil || pre.failed || pre.from > res.Snapshot.RevisionLow+1 {
			// It started after the full's revision (a member that lagged):
			// a gap; or it failed (see startPrewatch).
			pre.close()
			pre, held = nil, nil
		}
		switch {
		case bounded:
			var missing []string
			for _, o := range res.Outcomes {
				if o.Err != nil {
					missing = append(missing, o.Destination)
					f.logger().Warn("full backup to start a chain failed on a destination", "cluster", f.Cluster,
						"destination", o.Destination, "error", o.Err)
				}
			}
			return chainStart{next: res.Snapshot.RevisionLow + 1, chain: res.ID, high: res.Snapshot.RevisionHigh, held: held, pre: pre, missing: missing}, nil
		case err == nil:
			unbounded++
			if unbounded == maxUnboundedFulls {
				return chainStart{}, fmt.Errorf("full backup to start a chain: %d full backups in a row without a known revision (the last %s)", unbounded, res.ID)
			}
			f.logger().Warn("full backup has no known revision, it cannot start a chain: taking another",
				"cluster", f.Cluster, "backup", res.ID)
			if err := f.retry().wait(ctx, unbounded); err != nil {
				return chainStart{}, err
			}
			continue
		case !errors.Is(err, ErrBackupExists) || attempt == 3:
			return chainStart{}, fmt.Errorf("full backup to start a chain: %w", err)
		}
		if err := (retryPolicy{first: time.Second, max: time.Second}).wait(ctx, 1); err != nil {
			return chainStart{}, err
		}
	}
}

// fullInSlot takes the full backup req once a slot of the pipeline's
// RunSlots is free, with a prewatch opened in the slot (not while it
// waits for one: what etcd writes meanwhile is in the snapshot, and a
// host's followers waiting for slots would each hold up to maxHeldBytes).
// The prewatch is returned stopped (see prewatch.stop), its watch open.
func (f *Follower) fullInSlot(ctx context.Context, req Request) (*Result, *prewatch, []clientv3.WatchResponse, error) {
	release, err := f.Pipeline.Slots.take(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	defer release()
	pre := f.startPrewatch(ctx)
	res, err := f.Pipeline.runSlotted(ctx, req, true)
	return res, pre, pre.stop(), err
}

// maxHeldBytes bounds what a prewatch holds while a full backup is taken;
// past it, the prewatch gives up and the chain's watch starts after the
// full backup commits, as without one.
const maxHeldBytes = 64 << 20

// prewatchCreateTimeout bounds the wait for etcd to create a prewatch's
// watch; past it, the full backup is taken without one.
const prewatchCreateTimeout = 10 * time.Second

// prewatch watches every key from etcd's revision before a full backup,
// holding the responses in memory, up to maxHeldBytes. Once stopped, its
// watch stays open, unread, for the chain's watch to continue (see
// followState.openWatch), until close.
type prewatch struct {
	// from is the first revision watched, or later: etcd starts a watch
	// without a start revision (which compaction does not cancel while
	// it is read: one left unread long enough stalls in etcd, which may
	// then cancel it as compacted, a ChainGap) after its current
	// revision, and the created response's header may be
	// a later one (etcd wrote meanwhile). The revisions before from
	// that it holds are also held in order, and received once.
	from int64
	// resume is where wch continues after held, or later.
	resume int64
	ws     *watchStream
	wch    clientv3.WatchChan // ws.C
	cancel context.CancelFunc
	stopc  chan struct{}
	done   chan struct{}
	held   []clientv3.WatchResponse
	failed bool
}

// startPrewatch opens a prewatch, or returns nil when etcd does not create
// its watch.
func (f *Follower) startPrewatch(ctx context.Context) *prewatch {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	// The created response comes once etcd created the watch (or wctx
	// ended): the timeout cancels wctx, which closes the stream.
	timer := time.AfterFunc(prewatchCreateTimeout, cancel)
	ws, err := watchAll(wctx, f.Client, 0, true)
	if err != nil {
		timer.Stop()
		cancel()
		return nil
	}
	created := <-ws.C
	if !timer.Stop() || !created.Created || created.Err() != nil || created.Header == nil || created.Header.Revision == 0 {
		cancel()
		return nil
	}
	from := created.Header.Revision + 1
	p := &prewatch{from: from, resume: from, ws: ws, wch: ws.C, cancel: cancel,
		stopc: make(chan struct{}), done: make(chan struct{})}
	go p.hold()
	return p
}

// hold holds what the prewatch's watch delivers until stop, or until it
// fails: then it cancels the watch and drains it until it closes.
func (p *prewatch) hold() {
	defer close(p.done)
	size := 0
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case <-p.stopc:
			if !p.failed {
				return
			}
			wr, ok = <-p.wch
		case wr, ok = <-p.wch:
		}
		switch {
		case !ok:
			p.failed, p.held = true, nil // the watch ended (ctx did)
			return
		case p.failed:
			continue // drain until the channel closes
		}
		for _, ev := range wr.Events {
			size += len(ev.Kv.Key) + len(ev.Kv.Value) + 64
			p.resume = max(p.resume, ev.Kv.ModRevision+1)
		}
		if wr.CompactRevision != 0 || wr.Err() != nil || size > maxHeldBytes {
			p.failed, p.held = true, nil
			p.cancel()
			continue
		}
		p.held = append(p.held, wr)
	}
}

// stop stops holding and returns what the prewatch held, from its start
// without a gap (nil when it failed); its watch stays open unless it
// failed or ended (failed is then set).
func (p *prewatch) stop() []clientv3.WatchResponse {
	if p == nil {
		return nil
	}
	close(p.stopc)
	<-p.done
	return p.held
}

// close ends the prewatch's watch.
func (p *prewatch) close() {
	if p != nil {
		p.cancel()
	}
}

// resume returns where to start: after the last segment, or after the
// newest full backup, on every catalog; zero when no catalog has either
// (or, with catalogs shared by the targets, when one has neither).
// length is the number of segments of that chain on its catalog, and at
// the manifest of the resume point (its cluster ID and last put are
// checked against etcd's). points has each catalog's own. With a catalog
// per target, a catalog that cannot be listed is skipped (its point has
// the error: its target starts lost) unless every one fails; so is one
// that holds no chain yet (a destination added), and one whose point is
// not etcd's history or was compacted (see checkPoints): the follower
// resumes from the earliest point of the others.
func (f *Follower) resume(ctx context.Context) (next int64, chain string, length int64, at *Manifest, points []resumeAt, err error) {
	var errs []error
	own := len(f.Catalogs) == len(f.Targets)
	empty := 0
	for _, c := range f.Catalogs {
		entries, err := ListBackups(ctx, c, f.Cluster)
		if err != nil {
			err = fmt.Errorf("find where to resume: %w", err)
			points, errs = append(points, resumeAt{err: err}), append(errs, err)
			continue
		}
		n, ch, m := resumePoint(entries)
		if n == 0 {
			if !own {
				return 0, "", 0, nil, nil, nil
			}
			empty++
			points = append(points, resumeAt{err: errors.New("it holds no chain of the cluster yet")})
			continue
		}
		p := resumeAt{next: n, chain: ch, at: m}
		for _, e := range entries {
			if e.Kind == KindDelta && e.Manifest.Chain == ch {
				p.length++
			}
		}
		points = append(points, p)
	}
	if len(errs) == len(f.Catalogs) || (len(errs) > 0 && !own) {
		return 0, "", 0, nil, nil, errors.Join(errs...)
	}
	if empty+len(errs) == len(f.Catalogs) {
		return 0, "", 0, nil, nil, nil
	}
	if own && len(points) > 1 {
		f.checkPoints(ctx, points)
	}
	for _, p := range points {
		if p.err == nil && (next == 0 || p.next < next) {
			next, chain, length, at = p.next, p.chain, p.length, p.at
		}
	}
	return next, chain, length, at, points, nil
}

// resumeAt is where one catalog says its target resumes, or why it could
// not be listed or cannot resume.
type resumeAt struct {
	next   int64
	chain  string
	length int64     // the chain's segments on the catalog
	at     *Manifest // of the resume point
	err    error
}

// checkPoints checks each target's resume point against etcd (see
// checkPoint): a point of another history, or one etcd compacted, gets
// an error (its target starts lost, with a chain of its own) when another
// target's point passes. When none passes, they are left as they are: the
// watch loop checks the earliest as with one target (ChainRewound,
// ChainGap).
func (f *Follower) checkPoints(ctx context.Context, points []resumeAt) {
	verdicts := make([]error, len(points))
	passed := false
	for i, p := range points {
		if p.err == nil {
			verdicts[i] = f.checkPoint(ctx, p)
			passed = passed || verdicts[i] == nil
		}
	}
	if !passed {
		return
	}
	for i, err := range verdicts {
		if err != nil {
			points[i].err = err
		}
	}
}

// checkPoint checks a resume point against etcd as the watch loop checks
// the chain it follows (checkHistory: cluster ID, revision, last put), and
// that etcd still has the revisions after it. When etcd does not answer,
// nothing is known: nil.
func (f *Follower) checkPoint(ctx context.Context, p resumeAt) error {
	st := &followState{f: f, committed: p.next - 1}
	if p.at != nil {
		st.clusterID, _ = strconv.ParseUint(p.at.Etcd.ClusterID, 16, 64)
		st.lastPut = p.at.LastPut
	}
	err := st.checkHistory(ctx)
	switch {
	case errors.Is(err, ErrRewound):
		return fmt.Errorf("its chain %s is not etcd's history: %w", p.chain, err)
	case err != nil || p.next > st.head:
		return nil
	}
	_, err = f.Client.Get(clientv3.WithRequireLeader(ctx), "\x00", clientv3.WithCountOnly(), clientv3.WithRev(p.next))
	if errors.Is(err, rpctypes.ErrCompacted) {
		return fmt.Errorf("its chain %s continues from revision %d: %w", p.chain, p.next, ErrCompacted)
	}
	return nil
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
	// taken, to receive before watching; pre is that prewatch, whose
	// watch the chain's first watch continues (see openWatch).
	held          []clientv3.WatchResponse
	pre           *prewatch
	firstReceived time.Time // of the segment's first revision
	// watchStarted is when the running watch started (before its held
	// revisions are received); segmentWatchStarted is watchStarted when
	// the segment's first revision was received (Manifest.WatchStarted).
	watchStarted, segmentWatchStarted time.Time
	leases                            map[int64]bool
	// stopWatch cancels the running watch: called when no target can
	// store a segment, so that etcd stops sending events while the stores
	// retry.
	stopWatch context.CancelFunc
	targets   *followTargets
	// pending is the segment cut and handed to the targets, until one
	// holds it.
	pending *pendingSegment
	// watchCh is the running watch's channel, which await reads while a
	// segment is stored (what arrives would otherwise wait in gRPC's and
	// etcd's buffers, and stall the watch); heldBytes is what it holds in
	// held.
	watchCh   clientv3.WatchChan
	heldBytes int
	// until, for a recovery's tail, is the last revision it catches up;
	// zero for the chain followed.
	until int64
	// tails runs a recovery's tail (one at a time, tailRunning); refused
	// is the resume point of a recovery whose full backup failed, not
	// tried again there.
	tails       sync.WaitGroup
	tailRunning atomic.Bool
	// recovering is the tail running and not ended, recorded in the
	// chain's segments (Manifest.Recovery) so that a follower started
	// again resumes it; nil when none.
	recovering atomic.Pointer[RecoveryTail]
	stopTail   context.CancelFunc
	refused    int64
}

// drainHeld receives what a prewatch held while the chain's full backup
// was taken: the revisions after the full backup's, up to where the
// prewatch stopped. The prewatch's watch then continues from there (see
// openWatch).
//
// The watch loop holds what arrives while a segment is stored the same way
// (see await), and drains it before reading on. An error (errRewatch: the
// watch was cancelled meanwhile) drops what is left, and what arrived
// meanwhile: the next watch reads it again, from st.next.
func (st *followState) drainHeld(ctx context.Context) error {
	if p := st.pre; p != nil && st.stopWatch == nil {
		// The prewatch's watch runs on: what it delivers while a held
		// segment is stored is held and bounded as in the watch loop.
		st.stopWatch, st.watchCh = p.cancel, p.wch
		defer func() { st.stopWatch, st.watchCh = nil, nil }()
	}
	held := st.held
	st.held, st.heldBytes = nil, 0
	for _, wr := range held {
		if n := len(wr.Events); n == 0 || wr.Events[n-1].Kv.ModRevision < st.next {
			if wr.CompactRevision == 0 && wr.Err() == nil {
				continue
			}
		}
		if err := st.receive(ctx, wr); err != nil {
			// What arrived meanwhile follows what is dropped: a gap.
			st.held, st.heldBytes = nil, 0
			st.pre.close() // it buffered meanwhile, and continues after what is dropped
			st.pre = nil
			return err
		}
	}
	return nil
}

// hold keeps a response that arrived while a segment was stored, for
// drainHeld, and returns the bytes held. Its header shows etcd's head,
// for the lag of the segment being stored and of the next (FollowEvent's
// HeadRevision and Lag): a header of another cluster or below what was
// committed shows none; the watch, or the history check before the next,
// judges it.
func (st *followState) hold(wr clientv3.WatchResponse) int {
	st.held = append(st.held, wr)
	st.sawHeader(wr.Header)
	for _, ev := range wr.Events {
		st.heldBytes += len(ev.Kv.Key) + len(ev.Kv.Value) + 64
	}
	return st.heldBytes
}

// sawHeader records the head a held response's header shows (see hold):
// a header of another cluster or below what was committed shows none.
func (st *followState) sawHeader(h *etcdserverpb.ResponseHeader) {
	if h != nil && (st.clusterID == 0 || h.ClusterId == st.clusterID) && h.Revision >= st.committed {
		st.sawHead(h.Revision)
	}
}

// maxHeldWhileStoring bounds what the watch loop holds while a segment is
// stored: past it, the watch is cancelled, and opened again after what is
// held once it is received.
func (f *Follower) maxHeldWhileStoring() int { return 2 * f.maxSegmentBytes() }

// storeAbandoned stores the revisions held for a chain that ends (etcd's
// history changed, or it compacted past the chain): they belong to that
// chain's history, not the next one's. When no target stores them within
// FinalCommitTimeout, they are dropped, with a SegmentFailed event; the
// targets that work store their backlog of the chain within that time.
func (st *followState) storeAbandoned(ctx context.Context) {
	fctx, cancel := context.WithTimeout(ctx, cmpOr(st.f.FinalCommitTimeout, DefaultFinalCommitTimeout))
	defer cancel()
	if st.pending == nil && st.builder.empty() {
		st.targets.awaitDrained(fctx)
		return
	}
	sum := st.builder.sum
	if st.pending != nil {
		sum = st.pending.sum
	}
	if _, err := st.flush(fctx); err != nil {
		err = fmt.Errorf("revisions %d..%d of the ended chain dropped: %w", sum.FirstRevision, sum.LastRevision, err)
		st.f.event(FollowEvent{Kind: SegmentFailed, Chain: st.chain, Revision: sum.FirstRevision, Committed: st.committed, Err: err})
		st.f.logger().Warn("revisions held for a chain that ended could not be stored: dropped", "cluster", st.f.Cluster,
			"chain", st.chain, "first_revision", sum.FirstRevision, "last_revision", sum.LastRevision, "error", err)
	}
	st.targets.awaitDrained(fctx)
	st.builder, st.pending = newSegmentBuilder(), nil
}

// restart makes st and its targets follow the chain c, with an empty
// segment: what the ended chain held was stored or dropped
// (storeAbandoned); the ended chain's prewatch, if its first watch did
// not continue it yet, is closed. The heads c's held responses show are
// recorded as hold records them, so that the segments cut while they are
// drained report the head ChainStarted reported, not a lower one.
func (st *followState) restart(c chainStart) {
	if st.pre != c.pre {
		// The ended chain's (a recovery right after a chain started, before
		// its first watch): its watch would stay open until Run ends.
		st.pre.close()
	}
	st.next, st.chain, st.committed, st.chainLength = c.next, c.chain, c.next-1, 0
	st.builder, st.pending, st.held, st.pre = newSegmentBuilder(), nil, c.held, c.pre
	st.head, st.clusterID, st.lastPut, st.heads = 0, 0, nil, nil
	st.leases = map[int64]bool{}
	for _, wr := range c.held {
		st.sawHeader(wr.Header)
	}
	st.targets.restart(c.next, c.chain, c.missing)
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
	cancel, ws, err := st.openWatch(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	wch := ws.C
	// Only while the watch runs: a store after it ended (of what a
	// prewatch held) has no watch to stop, and must not be cut short.
	st.stopWatch = cancel
	defer func() { st.stopWatch = nil }()
	st.watchCh = wch // read by await while a segment is stored
	defer func() { st.watchCh = nil }()
	interval := st.f.flushInterval()
	// One timer, set for the next moment there is something to do (not a
	// ticker): a process of a thousand followers wakes each about once a
	// second, not eight times, and a segment is stored when it is due.
	timer := time.NewTimer(st.nextWake(st.f.Pipeline.now(), time.Time{}, interval))
	defer timer.Stop()
	var asked time.Time
	for {
		if len(st.held) > 0 {
			// What arrived while a segment was stored comes first.
			if err := st.drainHeld(ctx); err != nil {
				if errors.Is(err, errRewatch) {
					return nil
				}
				return err
			}
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			now := st.f.Pipeline.now()
			switch {
			case !st.builder.empty() && now.Sub(st.firstReceived) >= interval:
				if retried, err := st.flush(ctx); err != nil || retried {
					return err
				}
			case st.builder.empty() && now.Sub(asked) >= interval:
				// Learn etcd's head revision, for the lag.
				asked = now
				_ = ws.requestProgress()
			}
			timer.Reset(st.nextWake(st.f.Pipeline.now(), asked, interval))
		case wr, ok := <-wch:
			if !ok {
				if err := ctx.Err(); err != nil {
					return err
				}
				// The stream broke (a member stopped, the connection
				// reset) or etcd cancelled the watch: what is held is
				// stored now, not once etcd answers again (with no
				// watch left to cancel).
				st.stopWatch, st.watchCh = nil, nil
				if _, err := st.flush(ctx); err != nil {
					return err
				}
				return cmp.Or(ws.Err(), errors.New("watch ended"))
			}
			if err := st.receive(ctx, wr); err != nil {
				if errors.Is(err, errRewatch) {
					// The segment was cut inside wr and its store had to
					// wait: what wr held past the cut was dropped, so the
					// responses held meanwhile would follow a gap. The
					// next watch reads them again, from st.next.
					st.held, st.heldBytes = nil, 0
					return nil
				}
				return err
			}
		}
	}
}

// nextWake returns how long the watch loop may wait, at now, before it
// has something to do: store the segment interval after its first
// revision was received; with no segment, ask etcd for its revision
// interval after it last asked (asked), but not sooner than interval/8
// from now, which leaves the next revision time to arrive first. A
// revision received meanwhile starts a segment due no sooner than the
// wait ends. The wait is at least 5 ms.
func (st *followState) nextWake(now, asked time.Time, interval time.Duration) time.Duration {
	var d time.Duration
	if !st.builder.empty() {
		d = st.firstReceived.Add(interval).Sub(now)
	} else {
		d = max(asked.Add(interval).Sub(now), interval/8)
	}
	return max(d, 5*time.Millisecond)
}

// openWatch opens a watch from st.next; or, for a chain's first watch,
// continues the prewatch's when it delivers every revision from st.next
// on: a watch from st.next would be cancelled if etcd compacted past it
// since the prewatch stopped (what it delivers before st.next, receive
// skips).
func (st *followState) openWatch(ctx context.Context) (context.CancelFunc, *watchStream, error) {
	if p := st.pre; p != nil {
		st.pre = nil
		if p.resume <= st.next {
			return p.cancel, p.ws, nil
		}
		p.close()
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	ws, err := watchAll(wctx, st.f.Client, st.next, false)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return cancel, ws, nil
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
		if st.until > 0 && rev > st.until {
			return st.tailEnd(ctx) // a recovery's tail: caught up
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
		if st.until > 0 && st.next > st.until {
			return st.tailEnd(ctx)
		}
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

// flush hands the segment held, if any, to the targets and waits until
// one of them holds it. retried reports whether the watch was cancelled
// meanwhile (no target could store it, or the stores were slow): the
// caller then watches again from st.next, dropping what etcd's client
// buffered meanwhile. A segment that no target stored before ctx ended
// stays pending: the next flush waits for it again.
func (st *followState) flush(ctx context.Context) (retried bool, err error) {
	if st.pending == nil {
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
		// The chain's last put, from an earlier segment when this one
		// holds deletes only: a follower resuming after it checks it.
		lastPut := cmp.Or(b.lastPut, st.lastPut)
		seg.base.LastPut, seg.base.WatchStarted = lastPut, st.segmentWatchStarted
		seg.base.Recovery = st.recovering.Load()
		st.pending = &pendingSegment{encodedSegment: seg, sum: b.sum, raw: len(raw), firstReceived: st.firstReceived, lastPut: lastPut}
		b.release() // encoded: raw is no longer read
		st.builder = newSegmentBuilder()
		st.targets.enqueue(st.pending)
	}
	p := st.pending
	retried, err = st.await(ctx, p)
	if err != nil {
		return retried, err
	}
	st.pending = nil
	st.committed = p.sum.LastRevision
	st.lastPut = cmp.Or(p.lastPut, st.lastPut)
	st.chainLength++
	f := st.f
	// The lag from the segment's first revision, known since etcd first
	// showed it, to its commit (when the target's store returned, not when
	// this goroutine heard of it); the oldest revision left uncommitted
	// may have been known longer, to now.
	at := p.heldAt(st.targets.recovery, f.Pipeline.now())
	lag := at.Sub(p.firstReceived)
	for _, m := range st.heads {
		if m.rev >= p.sum.FirstRevision {
			lag = max(lag, at.Sub(m.seen))
			break
		}
	}
	lag = max(lag, st.uncommittedFor())
	f.event(FollowEvent{Kind: SegmentCommitted, Chain: st.chain, Revision: p.sum.FirstRevision, ChainLength: st.chainLength,
		HeadRevision: max(st.head, st.committed), Committed: st.committed, Lag: lag, Manifests: p.committed(),
		RawBytes: int64(p.raw), StoredBytes: int64(len(p.stored)), Events: p.sum.Events, Revisions: p.sum.Revisions})
	f.logger().Debug("segment committed", "cluster", f.Cluster, "first_revision", p.sum.FirstRevision,
		"last_revision", p.sum.LastRevision, "events", p.sum.Events, "stored_bytes", len(p.stored))
	return retried, nil
}

// await waits until a target holds p. The running watch is cancelled when
// every target failed its last attempt, or after SlowStore.
func (st *followState) await(ctx context.Context, p *pendingSegment) (stopped bool, err error) {
	f := st.f
	var slow <-chan time.Time
	if st.stopWatch != nil {
		t := time.NewTimer(cmpOr(f.SlowStore, DefaultSlowStore))
		defer t.Stop()
		slow = t.C
	}
	slowed := false
	for {
		held, failing := st.targets.progress(p.sum.LastRevision)
		if held {
			break
		}
		if failing && st.targets.recovery && st.targets.allLost() {
			return stopped, errTailLost
		}
		if failing && !stopped && st.stopWatch != nil {
			st.stopWatch()
			st.watchCh, stopped = nil, true
		}
		var drop <-chan time.Time // in a tail, a target failing too long
		if st.targets.recovery {
			drop = time.After(st.targets.dropStuck(f.tailBound()))
		}
		select {
		case <-ctx.Done():
			return stopped, ctx.Err()
		case <-drop:
		case <-slow:
			if !stopped {
				st.stopWatch()
				st.watchCh, stopped, slowed = nil, true, true
			}
		case <-st.targets.changed:
		case wr, ok := <-st.watchCh:
			if !ok {
				st.watchCh = nil // the watch ended: the loop sees it
				continue
			}
			if n := st.hold(wr); n > f.maxHeldWhileStoring() && !stopped {
				st.stopWatch()
				st.watchCh, stopped = nil, true
				serr := fmt.Errorf("%w: %d bytes arrived while storing the segment", ErrSlowStore, n)
				f.event(FollowEvent{Kind: WatchRestarted, Chain: st.chain, Revision: st.next, Err: serr, RawBytes: int64(n)})
				f.logger().Warn("segment store is slower than the cluster's writes: the watch was cancelled, it resumes after what is held",
					"cluster", f.Cluster, "first_revision", p.sum.FirstRevision, "error", serr)
			}
		}
	}
	if slowed {
		serr := fmt.Errorf("%w: storing the segment took longer than %s", ErrSlowStore, cmpOr(f.SlowStore, DefaultSlowStore))
		f.event(FollowEvent{Kind: WatchRestarted, Chain: st.chain, Revision: p.sum.LastRevision + 1, Err: serr})
		f.logger().Warn("segment store was slow: the watch was cancelled, it resumes after the segment", "cluster", f.Cluster,
			"first_revision", p.sum.FirstRevision, "error", serr)
	}
	return stopped, nil
}

// finalFlush stores what is held once Run's context ended, unless the
// caller ended the cleanups of ctx (internal/cleanup): a scheduler whose
// stop budget is spent, or whose lock on the follower was lost (another
// replica may follow the cluster now, and store these revisions itself).
// It lets the targets that work store their backlog, within
// FinalCommitTimeout.
func (st *followState) finalFlush(ctx context.Context) error {
	if err := cleanup.Ended(ctx); err != nil && (!st.builder.empty() || st.pending != nil) {
		// What is held: the segment handed to the targets, if any, then
		// the one being built.
		first, last := st.builder.sum.FirstRevision, st.builder.sum.LastRevision
		if st.pending != nil {
			first = st.pending.sum.FirstRevision
			if st.builder.empty() {
				last = st.pending.sum.LastRevision
			}
		}
		return fmt.Errorf("last segment (revisions %d..%d) not stored: %w", first, last, err)
	}
	fctx, cancel := cleanup.Publish(ctx, cmpOr(st.f.FinalCommitTimeout, DefaultFinalCommitTimeout))
	defer cancel()
	if _, err := st.flush(fctx); err != nil {
		return fmt.Errorf("store the last segment: %w", err)
	}
	if behind := st.targets.awaitDrained(fctx); len(behind) > 0 {
		st.f.logger().Warn("follower stopped with destinations behind: they resume from their own position", "cluster", st.f.Cluster,
			"destinations", behind)
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
