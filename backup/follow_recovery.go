package backup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/metadata"
)

// DefaultRecoveryRevisions is how far behind etcd's head, by default, a
// follower catches up on the chain it follows before it recovers with a
// new full backup (Follower.RecoveryRevisions). etcd delivers a backlog of
// this size in seconds; at six times as much it took two minutes.
const DefaultRecoveryRevisions = 50_000

// The events of a recovery (see Follower, Recovery).
const (
	// RecoveryStarted: the follower is HeadRevision-Committed revisions
	// behind etcd's head on Chain (resuming at Revision), since Lag (see
	// FollowEvent.Lag): it takes a full backup at once, which starts a new
	// chain (ChainStarted), and catches the old chain's tail up in the
	// background.
	RecoveryStarted FollowEventKind = "RecoveryStarted"
	// RecoverySegmentCommitted: a segment of the old chain's tail (Chain)
	// is stored on a first target, up to Committed; HeadRevision is the
	// tail's last revision (the new full backup's): their difference is
	// what the tail still lacks.
	RecoverySegmentCommitted FollowEventKind = "RecoverySegmentCommitted"
	// RecoveryDone: the old chain's tail holds every revision up to
	// HeadRevision (Committed), or, with Err, it ended at Committed short
	// of it: the revisions between are not restorable from any chain.
	RecoveryDone FollowEventKind = "RecoveryDone"
)

// errTailDone ends a recovery's tail that reached its last revision, and
// errTailLost one no target can store.
var (
	errTailDone = errors.New("recovery tail caught up")
	errTailLost = errors.New("every destination lost revisions of the recovery tail")
)

func (f *Follower) recoveryRevisions() int64 {
	if f.RecoveryRevisions != 0 {
		return f.RecoveryRevisions
	}
	return DefaultRecoveryRevisions
}

// farBehind reports whether the chain followed is far enough behind
// etcd's head (as checkHistory last saw it) to recover.
func (st *followState) farBehind() bool {
	n := st.f.recoveryRevisions()
	return n > 0 && st.until == 0 && st.head-st.committed > n && st.next != st.refused && !st.tailRunning.Load()
}

// recover takes a full backup at once and follows a new chain from it;
// the old chain's tail, up to the full backup's upper revision, is caught
// up in the background (runTail). started is false when the full backup
// failed: the follower then catches up on its chain.
func (st *followState) recover(ctx context.Context) (started bool, err error) {
	f := st.f
	from, chain, head := st.next, st.chain, st.head
	f.event(FollowEvent{Kind: RecoveryStarted, Chain: chain, Revision: from, HeadRevision: head, Committed: st.committed,
		ChainLength: st.chainLength, Lag: st.uncommittedFor()})
	f.logger().Warn("follower far behind etcd's head: taking a full backup first, the chain's tail is caught up in the background",
		"cluster", f.Cluster, "chain", chain, "revision", from, "head_revision", head)
	began := f.Pipeline.now()
	c, err := f.takeFull(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		st.refused = from
		err = fmt.Errorf("full backup to protect the head: %w", err)
		f.event(FollowEvent{Kind: RecoveryDone, Chain: chain, Revision: from, HeadRevision: head, Committed: st.committed, Err: err})
		f.logger().Warn("recovery failed: catching up on the chain", "cluster", f.Cluster, "chain", chain, "error", err)
		return false, nil
	}
	st.storeAbandoned(ctx) // what the old chain held is its tail's start
	tail, lost := st.tail(c.high)
	st.restart(c)
	f.event(newChainStarted(c, f.Pipeline.now().Sub(began)))
	if tail == nil {
		f.event(FollowEvent{Kind: RecoveryDone, Chain: chain, Revision: from, HeadRevision: c.high, Committed: st.committed, Err: lost})
		return true, nil
	}
	// The tail ends with Run: on its context's end it stores what it
	// holds, as Run does; on an error of Run, at once.
	st.startTail(ctx, tail)
	return true, nil
}

// newChainStarted is the ChainStarted event of a recovery's new chain,
// with its lag: etcd's head as far as the prewatch showed it, minus the
// full backup's upper revision, and, when the head is past it, the time
// since the full backup began (no revision past it is older).
func newChainStarted(c chainStart, took time.Duration) FollowEvent {
	head := c.high
	if n := len(c.held); n > 0 && c.held[n-1].Header.Revision > head {
		head = c.held[n-1].Header.Revision
	}
	var lag time.Duration
	if head > c.next-1 {
		lag = took
	}
	return FollowEvent{Kind: ChainStarted, Chain: c.chain, Revision: c.next, Committed: c.next - 1, HeadRevision: head, Lag: lag}
}

// endTails ends a recovery's tail, if one runs, once Run returns: it
// stores what it holds (its context ended), then returns.
func (st *followState) endTails() {
	if st.stopTail != nil {
		st.stopTail()
	}
	st.tails.Wait()
}

// tail returns the state of the old chain's tail up to until: each target
// continues from what it holds of its chain, and the watch starts from
// the earliest; nil when no target can (all lost, or holding until).
// What the targets' backlogs held is dropped (they hold nothing the tail
// does not read again), so that restart does not report it lost.
func (st *followState) tail(until int64) (_ *followState, lost error) {
	return st.tailFrom(until, st.lastPut, func(t *targetState) (string, int64, bool) { return t.chain, t.committed, t.lost })
}

// tailFrom is tail with each target's chain, last committed revision and
// whether it is lost given by at, and the chain's last put.
func (st *followState) tailFrom(until int64, lastPut *PutMark, at func(*targetState) (string, int64, bool)) (_ *followState, lost error) {
	tf := *st.f
	tf.Observer = recoveryObserver{f: st.f, until: until}
	all := &followTargets{f: &tf, maxBytes: st.f.maxBacklogBytes(), changed: make(chan struct{}, 1), recovery: true}
	var next int64
	chain := st.chain
	for _, t := range st.targets.list {
		t.mu.Lock()
		tch, tcommitted, tlost := at(t)
		ts := &targetState{t: t.t, catalog: t.catalog, chain: tch, committed: tcommitted, lost: tlost, behind: t.behind,
			wake: make(chan struct{}, 1)}
		t.backlog, t.bytes = nil, 0
		t.mu.Unlock()
		all.list = append(all.list, ts)
		if !ts.lost && ts.committed < until && (next == 0 || ts.committed+1 < next) {
			next, chain = ts.committed+1, ts.chain
		}
	}
	if next == 0 {
		if all.allLost() {
			return nil, errTailLost
		}
		return nil, nil // every target holds the tail already
	}
	codec, err := newSegmentCodec(st.f.Cluster, st.f.Pipeline)
	if err != nil {
		return nil, err // the follower's own codec was made the same way
	}
	return &followState{f: &tf, codec: codec, builder: newSegmentBuilder(), leases: map[int64]bool{}, targets: all,
		next: next, committed: next - 1, chain: chain, chainLength: st.chainLength, clusterID: st.clusterID,
		lastPut: lastPut, until: until}, nil
}

// startTail runs tail in the background until Run returns (endTails).
func (st *followState) startTail(ctx context.Context, tail *followState) {
	tctx, cancel := context.WithCancel(ctx)
	st.stopTail = cancel
	st.tailRunning.Store(true)
	st.tails.Go(func() {
		defer st.tailRunning.Store(false)
		tail.runTail(tctx)
	})
}

// unfinishedTail finds, in a catalog's entries, the tail of a recovery a
// follower stopped before it was caught up: the segments of another chain
// end at last, below the upper revision of the full backup the chain
// followed started from (until), and no chain holds the revisions between.
func unfinishedTail(entries []Entry, chain string) (last *Manifest, until int64) {
	var base *Manifest
	for _, e := range entries {
		if e.ID == chain && e.ChainBase() {
			base = e.Manifest
		}
	}
	if base == nil {
		return nil, 0
	}
	until = base.Etcd.Revision.High
	for _, e := range entries {
		m := e.Manifest
		if e.Kind != KindDelta || m.Chain == chain || m.LastRevision >= until {
			continue
		}
		if last == nil || m.LastRevision > last.LastRevision {
			last = m
		}
	}
	if last == nil || last.LastRevision+1 > base.Etcd.Revision.Low {
		return nil, 0 // no chain before, or it reaches the full backup
	}
	return last, until
}

// resumeTail resumes, when the follower starts, the tail of a recovery it
// was stopped in (RecoveryStarted, then RecoveryDone as for any tail):
// the old chain's segments end below the full backup the chain followed
// started from. A tail etcd compacted meanwhile ends at once, reported
// with ErrCompacted; the revisions between are then a gap.
func (st *followState) resumeTail(ctx context.Context) {
	f := st.f
	if len(f.Catalogs) == 0 {
		return
	}
	entries, err := ListBackups(ctx, f.Catalogs[0], f.Cluster)
	if err != nil {
		return // resume read the catalogs already: a failure here is transient
	}
	last, until := unfinishedTail(entries, st.chain)
	if last == nil {
		return
	}
	f.event(FollowEvent{Kind: RecoveryStarted, Chain: last.Chain, Revision: last.LastRevision + 1, HeadRevision: until,
		Committed: last.LastRevision})
	f.logger().Warn("the chain's tail before its full backup was not caught up: catching it up in the background",
		"cluster", f.Cluster, "chain", last.Chain, "revision", last.LastRevision+1, "until", until)
	tail, lost := st.tailFrom(until, last.LastPut, func(t *targetState) (string, int64, bool) {
		return last.Chain, last.LastRevision, t.lost
	})
	if tail == nil {
		f.event(FollowEvent{Kind: RecoveryDone, Chain: last.Chain, Revision: last.LastRevision + 1, HeadRevision: until,
			Committed: last.LastRevision, Err: lost})
		return
	}
	st.startTail(ctx, tail)
}

// runTail catches the tail up: it watches from st.next to st.until,
// storing segments of the old chain as the follower does, until it holds
// st.until, or it cannot go on (RecoveryDone with Err), or ctx ends (it
// stores what it holds, as Run does). Its watch runs on a gRPC watch
// stream of its own (see tailStream): nothing it holds or waits for is
// the chain followed's.
func (st *followState) runTail(ctx context.Context) {
	f := st.f
	ctx = tailStream(ctx)
	from := st.next
	st.targets.start(ctx)
	defer st.targets.stop()
	var end error
	for attempt := 1; ; attempt++ {
		st.watchStarted = f.Pipeline.now()
		err := st.checkHistory(ctx)
		if err == nil {
			err = st.watch(ctx)
		}
		if errors.Is(err, errTailDone) {
			st.targets.awaitDrained(ctx)
			break
		}
		if ctx.Err() != nil {
			if ferr := st.finalFlush(ctx); ferr != nil {
				f.logger().Warn("recovery tail: last segment not stored", "cluster", f.Cluster, "error", ferr)
			}
			end = fmt.Errorf("follower stopped: %w", context.Cause(ctx))
			break
		}
		if errors.Is(err, ErrCompacted) || errors.Is(err, ErrRewound) || errors.Is(err, errTailLost) {
			end = err
			break
		}
		if err == nil {
			attempt = 0 // watch again after a store: not a failure
			continue
		}
		f.event(FollowEvent{Kind: WatchRestarted, Chain: st.chain, Revision: st.next, Err: err})
		if f.retry().wait(ctx, attempt) != nil {
			continue // ctx ended: store what is held, above
		}
	}
	f.event(FollowEvent{Kind: RecoveryDone, Chain: st.chain, Revision: from, HeadRevision: st.until, Committed: st.committed, Err: end})
	if end != nil {
		f.logger().Warn("recovery tail ended short of the full backup: the revisions between are not restorable", "cluster", f.Cluster,
			"chain", st.chain, "committed_revision", st.committed, "until", st.until, "error", end)
		return
	}
	f.logger().Info("recovery tail caught up", "cluster", f.Cluster, "chain", st.chain, "committed_revision", st.committed)
}

// tailStream returns ctx with the metadata that puts a tail's watch on a
// gRPC watch stream of its own. The client multiplexes the watches of one
// context's metadata on one stream, and etcd answers a progress request
// on a stream only once every watcher on it is synced: a tail catching up
// on the follower's stream would hold back the progress notifications
// the chain followed learns etcd's head from (its lag).
func tailStream(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "etcdbackup-watch", "recovery-tail")
}

// tailEnd stores what the tail holds: it reached its last revision.
func (st *followState) tailEnd(ctx context.Context) error {
	if _, err := st.flush(ctx); err != nil {
		return err
	}
	return errTailDone
}

// recoveryObserver passes a tail's events on to the follower's observer:
// its commits as RecoverySegmentCommitted (the chain followed reports
// SegmentCommitted, and the lag), its stores, failures and watch
// restarts as they are; the state of its targets (TargetBehind, ...) is
// not reported, the chain followed reports the targets'.
type recoveryObserver struct {
	f     *Follower
	until int64
}

// ObserveFollow implements FollowObserver.
func (o recoveryObserver) ObserveFollow(e FollowEvent) {
	switch e.Kind {
	case SegmentCommitted:
		e.Kind, e.HeadRevision = RecoverySegmentCommitted, o.until
	case SegmentStored, SegmentFailed, WatchRestarted, RecoveryDone:
	default:
		return
	}
	if o.f.Observer != nil {
		o.f.Observer.ObserveFollow(e)
	}
}
