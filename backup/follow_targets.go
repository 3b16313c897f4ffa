package backup

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/etcdbackup/etcdbackup/internal/cleanup"
)

// DefaultMaxBacklogBytes bounds, by default, the stored bytes of the
// segments a follower holds for a target that is behind the others.
const DefaultMaxBacklogBytes = 64 << 20

// pendingSegment is a segment cut from the watch, encoded once and stored
// by every target's worker: a target continues its own chain with it.
type pendingSegment struct {
	*encodedSegment
	sum           SegmentSummary
	raw           int
	firstReceived time.Time
	lastPut       *PutMark

	mu        sync.Mutex
	manifests []*Manifest // committed so far, one per target
	times     []time.Time // when each was committed
}

func (p *pendingSegment) committedOn(m *Manifest, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.manifests = append(p.manifests, m)
	p.times = append(p.times, at)
}

// heldAt returns when the segment was first held as await waits for it:
// its first commit on a target; def when none is recorded, or when every
// target must hold it (a recovery's tail, where a target dropped as lost
// records no time).
func (p *pendingSegment) heldAt(every bool, def time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.times) == 0 || every {
		return def
	}
	return slices.MinFunc(p.times, time.Time.Compare)
}

func (p *pendingSegment) committed() []*Manifest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.manifests)
}

// targetState is one target's own progress: the chain it continues, the
// last revision it holds, and its backlog, the segments cut since then,
// which its worker stores in order. A target that fails falls behind
// while the others go on; its backlog is bounded (MaxBacklogBytes), and a
// target whose backlog lost a segment it lacks is lost: it catches up with
// a full backup of its own, which starts a new chain there.
type targetState struct {
	t       Target
	catalog Catalog // the target's own catalog; nil when catalogs are shared

	mu        sync.Mutex
	chain     string
	committed int64 // the last revision the target holds
	gen       int   // bumped when the follower starts a new chain
	backlog   []*pendingSegment
	bytes     int  // stored bytes of the backlog
	failing   bool // its last attempt failed
	behind    bool // failed since it last held everything
	lost      bool // lacks revisions no longer held: needs a full backup
	// failingSince is when its attempts began to fail (while failing),
	// failedAt when its last attempt failed; trying: an attempt is in
	// flight.
	failingSince time.Time
	failedAt     time.Time
	trying       bool
	wake         chan struct{}
}

// followTargets runs a worker per target.
type followTargets struct {
	f        *Follower
	list     []*targetState
	maxBytes int
	changed  chan struct{} // a target stored or failed (one waiter: Run)
	// recovery: the targets of a recovery's tail, which never take a
	// full backup: a target lost there has lost the tail's points. A
	// tail reads etcd's history at its own pace: each segment waits for
	// every target not lost (see progress).
	recovery bool
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	mu sync.Mutex
	// turnedLost are, in a recovery's tail, the destinations that turned
	// lost while the workers ran, not at their start: RecoveryDone lists
	// them (a target lost there stays lost).
	turnedLost []string
}

// newFollowTargets returns the targets of f, each resuming after the point
// its own catalog holds (points[i], when there is a catalog per target)
// or else after next of chain.
func (f *Follower) newFollowTargets(next int64, chain string, points []resumeAt) *followTargets {
	all := &followTargets{f: f, maxBytes: f.maxBacklogBytes(), changed: make(chan struct{}, 1)}
	for i, t := range f.Targets {
		ts := &targetState{t: t, chain: chain, committed: next - 1, wake: make(chan struct{}, 1)}
		if len(f.Catalogs) == len(f.Targets) {
			ts.catalog = f.Catalogs[i]
			if i < len(points) && points[i].next > 0 {
				ts.chain, ts.committed = points[i].chain, points[i].next-1
			}
			if i < len(points) && points[i].err != nil {
				ts.lost, ts.behind = true, true
				f.targetLost(t.Destination, next, points[i].err)
			}
		}
		all.list = append(all.list, ts)
	}
	return all
}

func (f *Follower) maxBacklogBytes() int {
	if f.MaxBacklogBytes > 0 {
		return f.MaxBacklogBytes
	}
	return DefaultMaxBacklogBytes
}

// start runs the workers until stop; they outlive ctx, so that the last
// segment is stored once Run's context ends, but not a bound of ctx's
// publishing cleanups (internal/cleanup): a spent stop budget or a lost
// lock ends them at once.
func (all *followTargets) start(ctx context.Context) {
	wctx, cancel := cleanup.Publish(ctx, math.MaxInt64)
	all.cancel = cancel
	for _, t := range all.list {
		all.wg.Go(func() { t.run(wctx, all) })
	}
}

func (all *followTargets) stop() {
	all.cancel()
	all.wg.Wait()
}

func (all *followTargets) notify() {
	select {
	case all.changed <- struct{}{}:
	default:
	}
}

// enqueue adds p to every target's backlog. A backlog past the bound loses
// its oldest segments: the target, when it lacks them, is lost.
func (all *followTargets) enqueue(p *pendingSegment) {
	for _, t := range all.list {
		t.mu.Lock()
		t.backlog = append(t.backlog, p)
		t.bytes += len(p.stored)
		for t.bytes > all.maxBytes && len(t.backlog) > 1 {
			t.popFront()
		}
		t.mu.Unlock()
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

// progress reports whether a target holds revision last (in a recovery's
// tail, every target that is not lost, at least one), and whether every
// target failed its last attempt or is lost.
//
// A tail waits for every target that is not lost: it reads history at
// its own pace, and a destination slower than another, or failing an
// attempt, would otherwise see its backlog pass MaxBacklogBytes and lose
// revisions of the tail it would store once it works again. One that
// keeps failing while another works is waited for a bound at most (see
// dropStuck); one whose store neither returns nor fails holds the tail
// back (not the chain followed) until Run ends; a follower started again
// resumes it.
func (all *followTargets) progress(last int64) (held, failing bool) {
	failing = true
	every := true // every target that is not lost holds last
	for _, t := range all.list {
		t.mu.Lock()
		holds := !t.lost && t.committed >= last
		held = held || holds
		every = every && (holds || t.lost)
		failing = failing && (t.failing || t.lost)
		t.mu.Unlock()
	}
	return held && (every || !all.recovery), failing
}

// dropStuck, in a recovery's tail, makes lost each target failing for
// bound while another target works (neither failing nor lost), so that
// the tail goes on without it (see dropFailing); it returns how long
// until the next target's bound. While no target works, none is dropped:
// the tail waits for one that does.
func (all *followTargets) dropStuck(bound time.Duration) time.Duration {
	if !all.recovery {
		return bound
	}
	working := false
	for _, t := range all.list {
		t.mu.Lock()
		working = working || (!t.failing && !t.lost)
		t.mu.Unlock()
	}
	if !working {
		return bound
	}
	wait, _ := all.dropFailing(time.Time{}, bound)
	return wait
}

// allLost reports whether every target is lost.
func (all *followTargets) allLost() bool {
	for _, t := range all.list {
		t.mu.Lock()
		lost := t.lost
		t.mu.Unlock()
		if !lost {
			return false
		}
	}
	return true
}

// awaitDrained waits until every target that is not failing holds its
// backlog, or ctx ends. It returns the targets still behind.
func (all *followTargets) awaitDrained(ctx context.Context) []string {
	for {
		var behind []string
		waiting := false
		for _, t := range all.list {
			t.mu.Lock()
			lacking := t.lost || t.lacking()
			waiting = waiting || (lacking && !t.failing && !t.lost)
			if lacking {
				behind = append(behind, t.t.Destination)
			}
			t.mu.Unlock()
		}
		if !waiting {
			return behind
		}
		select {
		case <-ctx.Done():
			return behind
		case <-all.changed:
		}
	}
}

// held reports whether every target that is not lost holds its backlog.
func (all *followTargets) held() bool {
	for _, t := range all.list {
		t.mu.Lock()
		lacking := !t.lost && t.lacking()
		t.mu.Unlock()
		if lacking {
			return false
		}
	}
	return true
}

// awaitTailStored waits, once a recovery's tail read its last revision,
// until every target that is not lost holds its backlog, failing ones
// included (they retry), or ctx ends; it reports whether they all do. A
// target that keeps failing is waited for no longer than bound, counted
// from the tail's end or from its first failure since, whichever is
// later, and until an attempt of it failed since then (see dropFailing).
// It is then lost for the tail (lostNow), and a
// follower started again resumes the tail there; without the bound, the
// tail would wait for it until Run ends, and no later outage could
// recover (one tail runs at a time).
func (all *followTargets) awaitTailStored(ctx context.Context, bound time.Duration) bool {
	end := time.Now()
	for {
		wait, held := all.dropFailing(end, bound)
		if held {
			return true
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return all.held()
		case <-all.changed:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// dropFailing makes lost each target that lacks its backlog and has been
// failing for bound since end, or since its first failure after end (see
// awaitTailStored), and failed an attempt since then: one in an attempt
// when the bound passes, or pausing before its next, is waited for until
// that attempt fails (it tells the waits, notify) or stores. It reports
// whether every other target holds its backlog, and else how long until
// the next target's bound, at most bound.
func (all *followTargets) dropFailing(end time.Time, bound time.Duration) (wait time.Duration, held bool) {
	now := time.Now()
	wait, held = bound, true
	for _, t := range all.list {
		t.mu.Lock()
		lacking, drop, from := !t.lost && t.lacking(), false, t.committed+1
		if lacking && t.failing {
			since := t.failingSince
			if since.Before(end) {
				since = end
			}
			switch left := bound - now.Sub(since); {
			case left > 0:
				wait = min(wait, left)
			case t.trying || t.failedAt.Before(since):
				// Waited for: its attempt's end tells the waits.
			default:
				t.lost, t.behind, drop = true, true, true
			}
		}
		t.mu.Unlock()
		if drop {
			all.lostNow(t, from, fmt.Errorf("still failing %s after the recovery tail's end", bound))
			continue
		}
		held = held && !lacking
	}
	return wait, held
}

// restart makes every target continue the new chain from next. Targets
// the chain's full backup did not reach (missing) are lost. A target that
// still lacked revisions of the ended chain its backlog held (it stored
// slower than the others) does not hold them: it is reported lost for
// that chain, and behind until it stores a segment of the new one.
func (all *followTargets) restart(next int64, chain string, missing []string) {
	for _, t := range all.list {
		t.mu.Lock()
		var dropped error
		if !t.lost && t.lacking() {
			dropped = fmt.Errorf("revisions %d..%d of the ended chain %s it had not stored were dropped",
				t.committed+1, t.backlog[len(t.backlog)-1].sum.LastRevision, t.chain)
			t.behind = true
		}
		from := t.committed + 1
		t.gen++
		t.backlog, t.bytes = nil, 0
		t.chain, t.committed = chain, next-1
		t.lost = slices.Contains(missing, t.t.Destination)
		t.behind = t.behind || t.lost
		t.mu.Unlock()
		if dropped != nil {
			all.f.event(FollowEvent{Kind: TargetLost, Destination: t.t.Destination, Revision: from, Err: dropped})
			all.f.logger().Warn("destination lacks revisions of the chain that ended: it continues the new chain",
				"cluster", all.f.Cluster, "destination", t.t.Destination, "revision", from, "chain", chain, "error", dropped)
		}
		if slices.Contains(missing, t.t.Destination) {
			all.f.targetLost(t.t.Destination, next, errors.New("the new chain's full backup did not reach it"))
		}
	}
}

// lacking reports whether the backlog holds revisions the target lacks.
func (t *targetState) lacking() bool {
	n := len(t.backlog)
	return n > 0 && t.backlog[n-1].sum.LastRevision > t.committed
}

func (t *targetState) popFront() {
	t.bytes -= len(t.backlog[0].stored)
	t.backlog[0] = nil
	t.backlog = t.backlog[1:]
}

// next returns the segment the target stores next, or lost when it lacks
// revisions its backlog no longer holds (reported here, outside t.mu, the
// first time: see lostNow).
func (t *targetState) next(all *followTargets) (seg *pendingSegment, chain string, gen int, lost bool) {
	f := all.f
	t.mu.Lock()
	for !t.lost && len(t.backlog) > 0 && t.backlog[0].sum.LastRevision <= t.committed {
		t.popFront()
	}
	var dropped error
	from := t.committed + 1
	if !t.lost && len(t.backlog) > 0 && t.backlog[0].sum.FirstRevision > from {
		t.lost, t.behind = true, true
		dropped = fmt.Errorf("revisions %d..%d left its backlog (over %d bytes)",
			from, t.backlog[0].sum.FirstRevision-1, f.maxBacklogBytes())
	}
	if !t.lost && len(t.backlog) > 0 {
		seg, chain, gen = t.backlog[0], t.chain, t.gen
	}
	lost = t.lost
	t.mu.Unlock()
	if dropped != nil {
		all.lostNow(t, from, dropped)
	}
	return seg, chain, gen, lost
}

// run stores the target's backlog in order, retrying a failed segment
// after the retry interval, and catches a lost target up with a full
// backup of its own.
func (t *targetState) run(ctx context.Context, all *followTargets) {
	f := all.f
	attempt := 0
	// The attempts at doubted whose commit failed: the first of them the
	// store holds after all is the segment's commit.
	var (
		doubted *pendingSegment
		tried   []*Manifest
	)
	for ctx.Err() == nil {
		seg, chain, gen, lost := t.next(all)
		if seg != doubted {
			doubted, tried = seg, nil
		}
		switch {
		case lost && all.recovery:
			return // next told the tail's waits
		case lost:
			attempt++
			pace := f.retry()
			if t.catalog == nil {
				// Each try is a full backup, an etcd snapshot: less often.
				pace.max *= 3
			}
			if pace.wait(ctx, attempt) != nil {
				return
			}
			if err := t.startOwnChain(ctx, f); err != nil {
				t.failed(ctx, f, attempt, err)
				all.notify()
				continue
			}
			attempt = 0
			all.notify()
		case seg == nil:
			select {
			case <-ctx.Done():
				return
			case <-t.wake:
			}
		default:
			attempt++
			t.setTrying(true)
			m, err := committedInDoubt(ctx, t.t, t.catalog, tried)
			if err == nil && m == nil {
				s := *seg.encodedSegment
				s.base.Chain = chain
				m, err = s.storeOnce(ctx, t.t, f.Pipeline.now(), attempt)
				if err != nil && m != nil {
					tried = rememberDoubt(tried, m)
				}
			}
			// stored and failed end the attempt with its outcome, under
			// one lock: a target between the two must not look idle and
			// still failing (dropFailing would drop one that stored).
			if err != nil {
				t.failed(ctx, f, attempt, err)
				all.notify()
				if f.retry().wait(ctx, attempt) != nil {
					return
				}
				continue
			}
			attempt = 0
			seg.committedOn(m, f.Pipeline.now())
			f.event(FollowEvent{Kind: SegmentStored, Revision: seg.sum.FirstRevision, Destination: t.t.Destination,
				Manifests: []*Manifest{m}, RawBytes: int64(seg.raw), StoredBytes: int64(len(seg.stored)),
				Events: seg.sum.Events, Revisions: seg.sum.Revisions})
			t.stored(f, seg, gen)
			all.notify()
		}
	}
}

// maxDoubted bounds the attempts in doubt a segment's retry reads back:
// the newest ones. A store that fails every manifest write in doubt (a
// 500, a timeout) for hours would otherwise cost each attempt a read per
// attempt before it, past SlowStore; a manifest that has not landed
// after that many attempts hardly lands, and if it does, the segment is
// stored twice, which restore replays once.
const maxDoubted = 8

// rememberDoubt adds m, an attempt whose commit is in doubt, to tried,
// dropping the oldest beyond maxDoubted.
func rememberDoubt(tried []*Manifest, m *Manifest) []*Manifest {
	if len(tried) >= maxDoubted {
		tried = slices.Delete(tried, 0, len(tried)-maxDoubted+1)
	}
	return append(tried, m)
}

// setTrying records whether an attempt of the target is in flight (see
// dropFailing).
func (t *targetState) setTrying(trying bool) {
	t.mu.Lock()
	t.trying = trying
	t.mu.Unlock()
}

// stored records that the target holds seg, ending the attempt that
// stored it. Events are reported outside t.mu: an observer may ask the
// follower's state.
func (t *targetState) stored(f *Follower, seg *pendingSegment, gen int) {
	t.mu.Lock()
	t.trying = false
	if gen != t.gen {
		t.mu.Unlock()
		return // of a chain the follower ended meanwhile
	}
	t.committed = max(t.committed, seg.sum.LastRevision)
	t.failing = false
	caughtUp := t.behind && !t.lacking()
	t.behind = t.behind && !caughtUp
	chain, committed := t.chain, t.committed
	t.mu.Unlock()
	if !caughtUp {
		return
	}
	f.event(FollowEvent{Kind: TargetCaughtUp, Destination: t.t.Destination, Chain: chain, Committed: committed})
	f.logger().Info("destination caught up", "cluster", f.Cluster, "destination", t.t.Destination,
		"chain", chain, "committed_revision", committed)
}

// failed reports a failed attempt of the target, ending it; the first
// since it held everything says it falls behind.
func (t *targetState) failed(ctx context.Context, f *Follower, attempt int, err error) {
	if ctx.Err() != nil {
		t.setTrying(false)
		return // Run ended: not the target's failure
	}
	t.mu.Lock()
	t.trying = false
	t.failedAt = time.Now()
	if !t.failing {
		t.failingSince = t.failedAt
	}
	t.failing = true
	wasBehind, committed, chain := t.behind, t.committed, t.chain
	t.behind = true
	t.mu.Unlock()
	dest := t.t.Destination
	f.event(FollowEvent{Kind: SegmentFailed, Chain: chain, Revision: committed + 1, Destination: dest, Err: err, Committed: committed})
	f.logger().Warn("segment store failed, retrying", "cluster", f.Cluster, "destination", dest,
		"first_revision", committed+1, "attempt", attempt, "error", err)
	if !wasBehind {
		f.event(FollowEvent{Kind: TargetBehind, Chain: chain, Revision: committed + 1, Destination: dest, Err: err, Committed: committed})
		f.logger().Warn("destination falls behind: the others go on, it catches up when it works again",
			"cluster", f.Cluster, "destination", dest, "committed_revision", committed, "error", err)
	}
}

// lostNow reports t, which turned lost (its state says so already):
// lacking revisions from from, for err. In a tail, it is recorded
// (turnedLost). It is told to the waits for the targets, which wait for
// no lost target (awaitDrained, awaitTailStored, a tail's flush).
func (all *followTargets) lostNow(t *targetState, from int64, err error) {
	if all.recovery {
		all.mu.Lock()
		all.turnedLost = append(all.turnedLost, t.t.Destination)
		all.mu.Unlock()
	}
	all.f.targetLost(t.t.Destination, from, err)
	all.notify()
}

// lostWhileRunning returns the destinations that turned lost while a
// tail's workers ran (lostNow).
func (all *followTargets) lostWhileRunning() []string {
	all.mu.Lock()
	defer all.mu.Unlock()
	return slices.Clone(all.turnedLost)
}

// targetLost reports a target that lacks revisions no longer held.
func (f *Follower) targetLost(dest string, from int64, err error) {
	f.event(FollowEvent{Kind: TargetLost, Destination: dest, Revision: from, Err: err})
	if o, ok := f.Observer.(recoveryObserver); ok {
		f.logger().Warn("destination lacks revisions of a recovery's tail that are no longer held: they are a gap there",
			"cluster", f.Cluster, "destination", dest, "chain", o.chain, "revision", from, "until", o.until, "error", err)
		return
	}
	f.logger().Warn("destination lacks revisions the follower no longer holds: it starts a new chain with a full backup of its own",
		"cluster", f.Cluster, "destination", dest, "revision", from, "error", err)
}

// startOwnChain takes a full backup on the target alone, after checking
// that its catalog answers: the target's chain starts again after it, and
// its backlog (what the follower cut meanwhile) continues it. A backlog
// that no longer reaches back to the full backup's revision loses the
// target again: its chain never has a hole. A full backup that completes
// after the follower started a new chain (restart) starts none: the
// target's state is the new chain's.
func (t *targetState) startOwnChain(ctx context.Context, f *Follower) error {
	if t.catalog != nil {
		if _, err := ListBackups(ctx, t.catalog, f.Cluster); err != nil {
			return fmt.Errorf("list the destination: %w", err)
		}
	}
	t.mu.Lock()
	gen := t.gen
	t.mu.Unlock()
	req := Request{Cluster: f.Cluster, Name: f.fullName(), Scheduled: true, Targets: []Target{t.t}}
	res, err := f.Pipeline.Run(ctx, req)
	if err != nil {
		return fmt.Errorf("full backup to start a chain on the destination: %w", err)
	}
	low, high := res.Snapshot.RevisionLow, res.Snapshot.RevisionHigh
	if low <= 0 || high < low {
		return fmt.Errorf("full backup %s has no known revision: it starts no chain", res.ID)
	}
	t.mu.Lock()
	if t.gen != gen {
		// The follower started a new chain meanwhile, which set the
		// target's state: the full backup may hold another history.
		t.mu.Unlock()
		f.logger().Info("a destination's own full backup completed after the follower started a new chain: it starts none",
			"cluster", f.Cluster, "destination", t.t.Destination, "backup", res.ID)
		return nil
	}
	t.chain, t.committed, t.lost, t.failing = res.ID, low, false, false
	t.mu.Unlock()
	f.event(FollowEvent{Kind: TargetRestarted, Destination: t.t.Destination, Chain: res.ID, Revision: low + 1})
	f.logger().Warn("destination starts a new chain of its own", "cluster", f.Cluster, "destination", t.t.Destination,
		"chain", res.ID, "revision", low+1)
	return nil
}
