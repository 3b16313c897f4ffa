package backup

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	// is stored on every target not lost, up to Committed; HeadRevision is the tail's last revision (the new
	// full backup's): their difference is what the tail still lacks.
	RecoverySegmentCommitted FollowEventKind = "RecoverySegmentCommitted"
	// RecoveryDone: the old chain's tail holds every revision up to
	// HeadRevision (Committed), or, with Err, it ended at Committed short
	// of it: the revisions between are not restorable from any chain
	// (reported first as ChainGap on Chain), unless the follower stopped
	// (a follower started again resumes the tail) or the recovery's full
	// backup failed (the follower catches up on its chain). Destinations
	// are those that lost revisions of the tail while it ran (each
	// reported first as TargetLost on Chain), one still failing
	// FinalCommitTimeout after it began to while another worked, or after
	// the tail read its last revision, included:
	// when the tail reached HeadRevision on the others, Err wraps
	// ErrTailIncomplete, the revisions they lack restore from the others,
	// and the tail stays recorded (Manifest.Recovery): a follower started
	// again resumes it on them.
	RecoveryDone FollowEventKind = "RecoveryDone"
)

// errTailDone ends a recovery's tail that reached its last revision, and
// errTailLost one no target can store.
var (
	errTailDone = errors.New("recovery tail caught up")
	errTailLost = errors.New("every destination lost revisions of the recovery tail")
)

// ErrNoTailChain ends a recovery's tail resumed when the old chain it
// continues is no longer in the catalog (retention removed it).
var ErrNoTailChain = errors.New("the recovery tail's chain is gone")

// ErrTailIncomplete is the error of a RecoveryDone whose tail reached its
// last revision while some destinations (FollowEvent.Destinations) lost
// revisions of it: they lack them until a follower started again resumes
// the tail there.
var ErrTailIncomplete = errors.New("destinations lack revisions of the recovery tail")

func (f *Follower) recoveryRevisions() int64 {
	if f.RecoveryRevisions != 0 {
		return f.RecoveryRevisions
	}
	return DefaultRecoveryRevisions
}

// tailBound is how long a recovery's tail waits for a target that keeps
// failing while another works, or once it read its last revision (see
// awaitTailStored): FinalCommitTimeout, and at least the longest pause
// between a target's attempts (ten times RetryInterval), so that a
// target makes an attempt within it.
func (f *Follower) tailBound() time.Duration {
	return max(cmpOr(f.FinalCommitTimeout, DefaultFinalCommitTimeout), f.retry().max)
}

// farBehind reports whether the chain followed is far enough behind
// etcd's head (as checkHistory last saw it) to recover. It does not while
// a tail is recorded (st.recovering: running, or kept for a follower
// started again, see startTail): the chain's segments record one tail, and
// a second recovery would replace it, so that no follower resumes the
// first where destinations lack it. The follower then catches up on its
// chain.
func (st *followState) farBehind() bool {
	n := st.f.recoveryRevisions()
	return n > 0 && st.until == 0 && st.head-st.committed > n && st.next != st.refused && !st.tailRunning.Load() &&
		st.recovering.Load() == nil
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
	// A chain's prewatch its first watch did not continue yet: unread
	// while the full backup is taken, etcd's client would buffer every
	// write meanwhile. Should the full backup fail, a watch from st.next
	// catches up.
	st.pre.close()
	st.pre = nil
	began := f.Pipeline.now()
	c, err := f.takeFullOf(ctx, chain)
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
		f.tailEnded(FollowEvent{Chain: chain, Revision: from, HeadRevision: c.high, Committed: st.committed, Err: lost})
		return true, nil
	}
	// The tail ends with Run: on its context's end it stores what it
	// holds, as Run does; on an error of Run, at once.
	st.startTail(ctx, tail, false)
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
	tf.Observer = recoveryObserver{f: st.f, until: until, chain: chain}
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

// startTail runs tail in the background until Run returns (endTails),
// recording it in the chain's segments until it ends (Manifest.Recovery),
// or for good when destinations lack it at its end (see runTail) or with
// keep (a target's catalog was not listed: what it holds of the tail is
// not known): a follower stopped meanwhile resumes it when it starts
// again.
func (st *followState) startTail(ctx context.Context, tail *followState, keep bool) {
	tctx, cancel := context.WithCancel(ctx)
	st.stopTail = cancel
	st.tailRunning.Store(true)
	rec := &RecoveryTail{Chain: tail.chain, Until: tail.until}
	st.recovering.Store(rec)
	st.tails.Go(func() {
		defer st.tailRunning.Store(false)
		if !tail.runTail(tctx) && !keep {
			st.recovering.CompareAndSwap(rec, nil) // ended: nothing to resume
		}
	})
}

// unfinishedTail returns where the old chain's tail of rec ends in a
// catalog's entries: its last segment's revision and last put (its full
// backup's revision when it has no segment); found is false when the
// catalog holds nothing of that chain.
func unfinishedTail(entries []Entry, rec *RecoveryTail) (last int64, lastPut *PutMark, found bool) {
	for _, e := range entries {
		m := e.Manifest
		switch {
		case e.Kind == KindDelta && m.Chain == rec.Chain && m.LastRevision > last:
			last, lastPut, found = m.LastRevision, m.LastPut, true
		case e.ID == rec.Chain && e.ChainBase() && !found:
			last, found = m.Etcd.Revision.Low, true
		}
	}
	return last, lastPut, found
}

// resumeTail resumes, when the follower starts, the tail of a recovery it
// was stopped in (RecoveryStarted, then RecoveryDone as for any tail):
// the chain's last segment (at) records it, and the old chain's segments
// end below its last revision on a target. Each target continues from
// what its own catalog holds of the tail (the first catalog when they are
// shared); one whose catalog holds nothing of the old chain has lost the
// tail (nothing there continues it); one whose catalog cannot be listed
// is left out, and the tail stays recorded for a follower started again.
// A tail etcd compacted meanwhile ends
// at once, reported with ErrCompacted; the revisions between are then a
// gap. A chain whose full backup merely has a hole before it (a
// compaction gap reported when the chain started) has no tail to resume.
func (st *followState) resumeTail(ctx context.Context, at *Manifest) {
	f := st.f
	if at == nil || at.Recovery == nil || len(f.Catalogs) == 0 {
		return
	}
	rec := at.Recovery
	holds, err := st.tailHolds(ctx, rec)
	if err != nil {
		st.recovering.Store(rec) // not ended: a follower started again tries it
		f.logger().Warn("recovery tail not resumed: its chain not listed", "cluster", f.Cluster, "chain", rec.Chain, "error", err)
		return
	}
	var start *tailHold // the earliest target that lacks some of the tail
	found, unknown := false, false
	for t, h := range holds {
		if h.err != nil {
			// Not known: the others go on, and the tail stays recorded
			// for a follower started again.
			unknown = true
			f.logger().Warn("recovery tail not resumed on a destination: its catalog not listed", "cluster", f.Cluster,
				"destination", t.t.Destination, "chain", rec.Chain, "error", h.err)
			continue
		}
		found = found || h.found
		if h.found && h.last < rec.Until && (start == nil || h.last < start.last) {
			start = &h
		}
	}
	if unknown && start == nil {
		st.recovering.Store(rec)
		return
	}
	if found && start == nil {
		return // caught up after the chain's last segment was stored
	}
	if !found {
		// Its chain is gone (retention): nothing continues it.
		last := holds[st.targets.list[0]].last
		f.event(FollowEvent{Kind: RecoveryStarted, Chain: rec.Chain, Revision: last + 1, HeadRevision: rec.Until, Committed: last})
		f.tailEnded(FollowEvent{Chain: rec.Chain, Revision: last + 1, HeadRevision: rec.Until, Committed: last,
			Err: fmt.Errorf("recovery tail of chain %s: %w", rec.Chain, ErrNoTailChain)})
		return
	}
	last := start.last
	f.event(FollowEvent{Kind: RecoveryStarted, Chain: rec.Chain, Revision: last + 1, HeadRevision: rec.Until, Committed: last})
	f.logger().Warn("the chain's tail before its full backup was not caught up: catching it up in the background",
		"cluster", f.Cluster, "chain", rec.Chain, "revision", last+1, "until", rec.Until)
	tail, lost := st.tailFrom(rec.Until, start.lastPut, func(t *targetState) (string, int64, bool) {
		h := holds[t]
		if !h.found || h.err != nil {
			return rec.Chain, last, true
		}
		return rec.Chain, h.last, t.lost
	})
	if tail == nil {
		f.tailEnded(FollowEvent{Chain: rec.Chain, Revision: last + 1, HeadRevision: rec.Until, Committed: last, Err: lost})
		return
	}
	st.startTail(ctx, tail, unknown)
}

// tailHold is how far a target holds a recovery's tail (see
// unfinishedTail).
type tailHold struct {
	last    int64
	lastPut *PutMark
	found   bool
	err     error // its catalog could not be listed
}

// tailHolds returns how far each target holds rec's tail: by its own
// catalog when it has one, else by the follower's first catalog, which
// the targets share. A catalog that cannot be listed gives its target's
// hold the error; when none can, it fails.
func (st *followState) tailHolds(ctx context.Context, rec *RecoveryTail) (map[*targetState]tailHold, error) {
	f := st.f
	holds := map[*targetState]tailHold{}
	var shared *tailHold
	var errs []error
	for _, t := range st.targets.list {
		if t.catalog == nil && shared != nil {
			holds[t] = *shared
			continue
		}
		c := t.catalog
		if c == nil {
			c = f.Catalogs[0]
		}
		entries, err := ListBackups(ctx, c, f.Cluster)
		if err != nil {
			err = fmt.Errorf("%s: %w", t.t.Destination, err)
			errs = append(errs, err)
			holds[t] = tailHold{err: err}
			continue
		}
		var h tailHold
		h.last, h.lastPut, h.found = unfinishedTail(entries, rec)
		holds[t] = h
		if t.catalog == nil {
			shared = &h
		}
	}
	if len(errs) == len(holds) {
		return nil, errors.Join(errs...)
	}
	return holds, nil
}

// runTail catches the tail up: it watches from st.next to st.until,
// storing segments of the old chain as the follower does, until it holds
// st.until, or it cannot go on (RecoveryDone with Err), or ctx ends (it
// stores what it holds, as Run does). Its watch runs on a gRPC watch
// stream of its own (see tailStream): nothing it holds or waits for is
// the chain followed's.
//
// resume reports whether a follower started again resumes it: it ended
// because ctx did, or destinations lost revisions of it (see tailDone).
func (st *followState) runTail(ctx context.Context) (resume bool) {
	f := st.f
	ctx = tailStream(ctx)
	from := st.next
	st.targets.start(ctx)
	defer st.targets.stop()
	var (
		end     error
		stopped bool
	)
	for attempt := 1; ; attempt++ {
		st.watchStarted = f.Pipeline.now()
		err := st.checkHistory(ctx)
		if err == nil {
			err = st.watch(ctx)
		}
		if errors.Is(err, errTailDone) {
			// Done once every target holds it: one failing retries
			// meanwhile, for FinalCommitTimeout at most (then it lacks
			// the tail, see tailDone). Should Run's context end first,
			// the targets get FinalCommitTimeout, as at any stop; a target
			// still behind then is resumed by a follower started again.
			if !st.targets.awaitTailStored(ctx, f.tailBound()) {
				if ferr := st.finalFlush(ctx); ferr != nil {
					f.logger().Warn("recovery tail: last segment not stored", "cluster", f.Cluster, "error", ferr)
				}
				if !st.targets.held() {
					end, stopped = fmt.Errorf("follower stopped: %w", context.Cause(ctx)), true
				}
			}
			break
		}
		if ctx.Err() != nil {
			if ferr := st.finalFlush(ctx); ferr != nil {
				f.logger().Warn("recovery tail: last segment not stored", "cluster", f.Cluster, "error", ferr)
			}
			end, stopped = fmt.Errorf("follower stopped: %w", context.Cause(ctx)), true
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
	return st.tailDone(from, end, stopped)
}

// tailDone reports the end of the tail read from from (RecoveryDone): end
// is why it ended short, stopped whether it ended because Run's context
// did. It returns whether a follower started again resumes it: it
// stopped, or it reached its last revision while destinations lost
// revisions of it (ErrTailIncomplete), which they lack until then.
func (st *followState) tailDone(from int64, end error, stopped bool) (resume bool) {
	f := st.f
	lacking := st.targets.lostWhileRunning()
	done := FollowEvent{Kind: RecoveryDone, Chain: st.chain, Revision: from, HeadRevision: st.until, Committed: st.committed,
		Err: end, Destinations: lacking}
	switch {
	case stopped:
		f.event(done) // resumed by a follower started again: no gap yet
	case end != nil:
		f.tailEnded(done)
	case len(lacking) > 0:
		done.Err = fmt.Errorf("%w: %s", ErrTailIncomplete, strings.Join(lacking, ", "))
		f.event(done)
		f.logger().Warn("recovery tail caught up, but destinations lost revisions of it: a follower started again resumes it there",
			"cluster", f.Cluster, "chain", st.chain, "until", st.until, "destinations", lacking)
		return true
	default:
		f.event(done)
		f.logger().Info("recovery tail caught up", "cluster", f.Cluster, "chain", st.chain, "committed_revision", st.committed)
		return false
	}
	f.logger().Warn("recovery tail ended short of the full backup: the revisions between are not restorable", "cluster", f.Cluster,
		"chain", st.chain, "committed_revision", st.committed, "until", st.until, "error", done.Err)
	return stopped
}

// tailEnded reports a recovery's tail ended (RecoveryDone, e): with
// e.Err, short of its last revision for good, first as the gap it leaves
// in the old chain (ChainGap from the first revision it lacks), as a
// compaction gap is.
func (f *Follower) tailEnded(e FollowEvent) {
	if e.Err != nil {
		f.event(FollowEvent{Kind: ChainGap, Chain: e.Chain, Revision: e.Committed + 1, Err: e.Err})
	}
	e.Kind = RecoveryDone
	f.event(e)
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
// restarts as they are, and a target that lost revisions of the tail as
// TargetLost on the tail's chain (a gap on that destination alone); the
// rest of the state of its targets (TargetBehind, ...) is not reported,
// the chain followed reports the targets'.
type recoveryObserver struct {
	f     *Follower
	until int64
	chain string
}

// ObserveFollow implements FollowObserver.
func (o recoveryObserver) ObserveFollow(e FollowEvent) {
	switch e.Kind {
	case SegmentCommitted:
		e.Kind, e.HeadRevision = RecoverySegmentCommitted, o.until
	case TargetLost:
		e.Chain = o.chain
	case SegmentStored, SegmentFailed, WatchRestarted, RecoveryDone, ChainGap:
	default:
		return
	}
	if o.f.Observer != nil {
		o.f.Observer.ObserveFollow(e)
	}
}
