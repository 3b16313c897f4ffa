package replicate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/cleanup"
	"github.com/etcdbackup/etcdbackup/storage"
)

// ErrConflict is returned for a backup whose ID the target holds already
// with other bytes: another backup's manifest or data object under the same
// key. The copy never overwrites it. It matches backup.ErrBackupExists.
var ErrConflict = fmt.Errorf("%w with other content on the target", backup.ErrBackupExists)

// ErrChainHole says why a chain's segments after a hole in the source's
// chain (revisions no segment holds) were NotCopied.
var ErrChainHole = errors.New("chain has a hole on the source")

// ErrChainBaseGone says why a chain is not whole (Chain.Err) although its
// segments were copied: a full backup they restore from was gone from the
// target by the time they were (a prune of the target ran meanwhile), so
// they restore from nothing there until it is copied again.
var ErrChainBaseGone = errors.New("chain's full backup is gone from the target")

// ErrNewerManifest says why a backup was not copied: its manifest on the
// source has fields this version does not know, added by a newer version
// that wrote it. A copy writes the manifest as it parses it and would drop
// them, so it copies nothing of that backup: copy it with a version at
// least as new as the one that wrote it.
var ErrNewerManifest = errors.New("manifest written by a newer version")

// ErrLeftOut says why a backup a Selection names by ID (or as a chain) is
// NotCopied: the selection's Retention or PointInTime leaves it out.
var ErrLeftOut = errors.New("named backup left out by the selection")

// ErrInvalidSource says why an entry of the source is NotCopied: what a
// Selection's All or Since selects holds a manifest that is not a backup
// this version can read (listed backup.KindInvalid): one that does not
// parse or validate (a newer version's, of a format or kind this one does
// not know, or a damaged one), or whose data object is missing or of
// another size. The target would lack it, so it is never skipped
// silently: its Item's ID is the manifest's file name, Kind is
// backup.KindInvalid and Err says what is wrong (errors.Is matches
// backup.ErrInvalidManifest when the manifest itself is). It does not
// fail Copy, which copies the rest (a replication job goes on, and prunes
// its targets); Metrics counts it apart, and the CLI's copy fails on it.
// Copy it with a version that reads it, or repair or remove it on the
// source.
var ErrInvalidSource = errors.New("the source holds a manifest this version cannot copy")

// ErrPending says why a backup's outcome is Pending: its data object is on
// the target, uncommitted, and another writer's.
var ErrPending = errors.New("another writer's data object is on the target")

// Target is where a copy writes.
type Target struct {
	// Name is the target destination's name, recorded in the manifests
	// the copy commits there. Required.
	Name string
	// Bucket reads what the target holds already. Required.
	Bucket storage.Bucket
	// Uploader stores and commits backups there; nil means a
	// backup.BucketUploader of Bucket. A *destination.Destination is both
	// and applies its object lock (see DestinationTarget).
	Uploader backup.Uploader
}

// DestinationTarget returns d as a copy's target: backups land there as
// a backup written to d would, locked when d has an object lock.
func DestinationTarget(d *destination.Destination) Target {
	return Target{Name: d.Name(), Bucket: d, Uploader: d}
}

// Copier copies stored backups of a cluster from one store to another, as
// they are stored: the bytes are not decoded, so a copy of an encrypted
// backup needs no key. See the package documentation for its guarantees.
// The zero values of the optional fields are sane defaults. A Copier may
// run several copies at once, of different clusters or targets.
type Copier struct {
	// Source lists and reads the backups to copy. Required.
	Source backup.Catalog
	// SourceName names the source in reports and logs.
	SourceName string
	// Target is where the backups are copied to. Required.
	Target Target
	// Recheck reads back the data object of every backup the target holds
	// already and checks its sha256 before skipping it; without it a
	// committed backup whose manifest matches and whose data object has
	// the manifest's size is skipped.
	Recheck bool
	// Observer receives the copy's events; nil means none.
	Observer Observer
	// Logger logs each backup copied; nil means silent.
	Logger *slog.Logger
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// ProgressInterval is the least time between Progress events of one
	// backup; zero means one second.
	ProgressInterval time.Duration
	// StallTimeout bounds how long a data object's transfer may go
	// without a byte moving from the source to the target: a transfer
	// stalled longer (a source that stopped sending, a target that stopped
	// taking) is cancelled and its backup fails with an error matching
	// backup.ErrDestinationStalled; the copy goes on with the next. Once
	// the source's object was read to its end, the rest of its upload
	// (the last part's request, a single object's write, a multipart
	// upload's completion) is given that long. It
	// bounds the same way the read-back of a data object on the target
	// (a resumed copy, Recheck), the reads of the target's manifests and
	// the listings of source and target (a stalled listing of the source fails the
	// copy; of the target, has each backup looked at alone), and each
	// request to the target that moves no data object (a Stat, a
	// manifest's commit, an object lock's read or write) is given that
	// long to answer. As with
	// backup.Pipeline.StallTimeout, an uploader may stop reading while it
	// sends a buffered part, so set it well above the time one part
	// takes. Zero means no bound.
	StallTimeout time.Duration
}

// Copy copies the selected backups of cluster from the source to the
// target: fulls and standalone backups oldest first, each chain's
// segments in revision order right after its full backup, on top of it,
// or, after every full backup, on top of a synthetic full backup that
// continues the chain (when the chain's first segments were pruned, or
// its full backup is gone). It returns a report of every backup and,
// when some backup failed or a backup or chain sel names (IDs, Chains)
// was left out by its Retention or PointInTime (NotCopied), an error
// joining their errors: errors.Is matches ErrLeftOut for the latter. A
// manifest that All or Since selects but this version cannot read is
// reported NotCopied (ErrInvalidSource), never skipped, without failing
// the copy. A
// segment is copied only once its full and the segments before it are on
// the target: when one cannot be copied (it vanished from the source, pruned
// meanwhile), the rest of its chain is not copied (NotCopied), so the
// target never holds a chain with a hole. A chain is reported whole only
// when the target still holds the full backups its segments restore from
// once they are copied; one a prune deleted meanwhile makes the chain not
// whole and Copy's error match ErrChainBaseGone.
func (c *Copier) Copy(ctx context.Context, cluster string, sel Selection) (*Report, error) {
	if err := c.validate(cluster, sel); err != nil {
		return nil, err
	}
	started := c.now()
	source := &timedCatalog{Catalog: c.Source, times: map[string]time.Time{}}
	entries, err := listBackups(ctx, source, cluster, c.StallTimeout)
	if err != nil {
		return nil, fmt.Errorf("list source: %w", err)
	}
	onSource := fullsOf(entries)
	entries = sel.of(entries)
	drop, err := sel.pruned(cluster, entries, started, source.times)
	if err != nil {
		return nil, err
	}
	groups, err := plan(entries, sel, drop)
	if err != nil {
		return nil, err
	}
	left := namedLeftOut(entries, sel, drop)
	total := len(left)
	for _, g := range groups {
		total += len(g.segments)
		if g.full != nil {
			total++
		}
	}
	r := &copyRun{c: c, ctx: ctx, cluster: cluster, total: total, sourceTimes: source.times,
		rep: &Report{Cluster: cluster, Source: c.SourceName, Target: c.Target.Name, Name: sel.Name}}
	bad := r.unreadable(entries, sel, onSource, oldestKept(groups))
	r.total += len(bad)
	r.held = c.listTarget(ctx, cluster)
	for _, m := range r.held {
		// Only copies of the source's own full backups may base the
		// source's segments: another writer's full backup on the target
		// (a synthetic one compacted there) was never checked against the
		// source, and its writer's retention may delete it under them.
		if src := onSource[m.ID]; src != nil && !m.IsDelta() && sameBackup(src, m) {
			r.bases = append(r.bases, m)
		}
	}
	r.event(Event{Kind: Planned, Total: total})
	c.logger().Info("copy started", "cluster", cluster, "from", c.SourceName, "to", c.Target.Name, "backups", r.total)
	for _, e := range left {
		r.index++
		r.record(Item{ID: e.ID, Kind: e.Kind, Outcome: NotCopied, Bytes: e.Size, Created: e.Created,
			Err: fmt.Errorf("%w: the selection's retention or point-in-time window leaves it out", ErrLeftOut)})
	}
	for _, e := range bad {
		r.index++
		r.record(Item{ID: e.ID, Kind: e.Kind, Outcome: NotCopied, Created: e.Created,
			Err: fmt.Errorf("%w: %s: %w", ErrInvalidSource, e.ManifestKey, e.Problem)})
	}
	r.groups(groups)
	r.rep.Elapsed = c.now().Sub(started)
	var errs []error
	for _, it := range r.rep.Items {
		if it.Outcome == Failed || it.Outcome == NotCopied && errors.Is(it.Err, ErrLeftOut) {
			errs = append(errs, fmt.Errorf("backup %s: %w", it.ID, it.Err))
		}
	}
	for _, ch := range r.rep.Chains {
		if ch.Err != nil {
			errs = append(errs, fmt.Errorf("chain %s: %w", ch.Full, ch.Err))
		}
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	c.logger().Info("copy ended", "cluster", cluster, "copied", r.rep.Count(Copied)+r.rep.Count(Resumed),
		"skipped", r.rep.Count(Skipped), "failed", r.rep.Count(Failed), "not_copied", r.rep.Count(NotCopied),
		"bytes", r.rep.CopiedBytes, "elapsed", r.rep.Elapsed)
	return r.rep, errors.Join(errs...)
}

// namedLeftOut returns the backups sel names that its retention or
// point-in-time window leaves out (drop): NotCopied, never left out
// silently. A backup named by ID is; a chain named (Chains) is, its full
// backup and segments, when all of it is left out. (A chain's full backup
// the window leaves out is not when some of its segments are selected:
// they are copied on top of the full backup that continues it.)
func namedLeftOut(entries []backup.Entry, sel Selection, drop map[string]bool) []backup.Entry {
	kept := map[string]bool{} // named chains of which something is selected
	for _, e := range entries {
		if chain := chainOf(e); slices.Contains(sel.Chains, chain) && !drop[e.ID] {
			kept[chain] = true
		}
	}
	var out []backup.Entry
	for _, e := range entries {
		chain := chainOf(e)
		named := slices.Contains(sel.IDs, e.ID) || slices.Contains(sel.Chains, chain) && !kept[chain]
		if drop[e.ID] && named {
			out = append(out, e)
		}
	}
	return out
}

// chainOf returns the chain e belongs to: its own ID for a full backup,
// its chain's for a segment; "" for other entries.
func chainOf(e backup.Entry) string {
	switch {
	case e.Manifest == nil:
		return ""
	case e.Kind == backup.KindDelta:
		return e.Manifest.Chain
	case e.Kind == backup.KindBackup:
		return e.ID
	}
	return ""
}

// fullsOf returns the full backups of entries by ID.
func fullsOf(entries []backup.Entry) map[string]*backup.Manifest {
	out := map[string]*backup.Manifest{}
	for _, e := range entries {
		if e.Kind == backup.KindBackup && e.Manifest != nil {
			out[e.ID] = e.Manifest
		}
	}
	return out
}

func (c *Copier) validate(cluster string, sel Selection) error {
	if err := backup.ValidateName("cluster", cluster); err != nil {
		return err
	}
	if err := sel.Validate(); err != nil {
		return err
	}
	switch {
	case c.Source == nil:
		return errors.New("copy has no source")
	case c.Target.Bucket == nil:
		return errors.New("copy has no target bucket")
	}
	if ro, ok := c.Target.Bucket.(interface{ ReadOnly() bool }); ok && ro.ReadOnly() {
		return fmt.Errorf("target %s: %w", c.Target.Name, storage.ErrReadOnly)
	}
	return backup.ValidateName("destination", c.Target.Name)
}

func (c *Copier) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Copier) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (c *Copier) uploader() backup.Uploader {
	if c.Target.Uploader != nil {
		return c.Target.Uploader
	}
	return &backup.BucketUploader{Bucket: c.Target.Bucket}
}

// listTarget returns the committed backups the target lists, by ID: a
// backup listed there, the same as the source's with its data object of
// the right size, is skipped without another request. Nil with Recheck
// (every backup is read back) or when the listing fails (each backup is
// then looked at alone).
func (c *Copier) listTarget(ctx context.Context, cluster string) map[string]*backup.Manifest {
	if c.Recheck {
		return nil
	}
	entries, err := listBackups(ctx, c.Target.Bucket, cluster, c.StallTimeout)
	if err != nil {
		c.logger().Warn("list target: looking at each backup alone", "target", c.Target.Name, "error", err)
		return nil
	}
	held := map[string]*backup.Manifest{}
	for _, e := range entries {
		switch e.Kind {
		case backup.KindBackup, backup.KindDelta, backup.KindKeysJSON:
			held[e.ID] = e.Manifest
		}
	}
	return held
}

// copyRun is the state of one Copy.
type copyRun struct {
	c       *Copier
	ctx     context.Context
	cluster string
	total   int
	index   int
	rep     *Report
	// held is what the target listed when the copy started (listTarget).
	held map[string]*backup.Manifest
	// bases are the full backups on the target, listed or copied, that
	// may base a chain's segments (bridge).
	bases []*backup.Manifest
	// sourceTimes are the source's store's modification times of its
	// objects, by key, as its listing gave them.
	sourceTimes map[string]time.Time
}

func (r *copyRun) event(e Event) {
	if r.c.Observer == nil {
		return
	}
	e.Time, e.Cluster, e.Total = r.c.now(), r.cluster, r.total
	e.Source, e.Target = r.c.SourceName, r.c.Target.Name
	if e.Index == 0 {
		e.Index = r.index
	}
	r.c.Observer.Observe(e)
}

// record adds it to the report.
func (r *copyRun) record(it Item) Item {
	r.rep.Items = append(r.rep.Items, it)
	r.event(Event{Kind: Done, ID: it.ID, Item: &it, Size: it.Bytes})
	log := r.c.logger().With("backup", it.ID, "cluster", r.cluster, "outcome", it.Outcome)
	if it.Err != nil {
		log.Warn("backup not copied", "error", it.Err)
	} else {
		log.Info("backup copied", "bytes", it.Bytes)
	}
	return it
}

// groups copies the groups in order, each chain's segments right after
// its full backup: a prune of the target keeps a chain whole while its
// store wrote some of it lately (retention.ChainPolicy.Grace), and a
// chain's full backup copied long before its segments (after the other
// full backups of a large copy) could be deleted under them. The segments
// of a chain that needs a full backup of a later group (a synthetic full
// backup across a hole, or none under its first segment) wait until every
// full backup is copied.
func (r *copyRun) groups(groups []group) {
	type deferred struct {
		g    group
		stop error
	}
	var later []deferred
	for _, g := range groups {
		stop := r.full(g)
		if g.standsAlone() {
			r.segments(g, stop)
		} else {
			later = append(later, deferred{g, stop})
		}
	}
	for _, d := range later {
		r.segments(d.g, d.stop)
	}
}

// full copies the full or standalone backup of g, and returns why its
// segments cannot follow it (nil when they can, or g has no full).
func (r *copyRun) full(g group) error {
	if g.full == nil {
		return nil
	}
	r.index++
	it := r.record(r.backup(g.full))
	if !present(it.Outcome) {
		return fmt.Errorf("its chain's full backup %s was not copied", g.full.ID)
	}
	r.bases = append(r.bases, g.full.Manifest)
	return nil
}

// segments copies the segments of g's chain in order, stopping at the
// first that could not be copied or that follows a hole. A hole (or a
// full backup the source no longer holds) is bridged by a full backup on
// the target that continues the chain from within the segment after it (a
// synthetic full backup, backup.Entry.Continues): the chain is whole from
// there, as retention leaves it when a point-in-time window no longer
// needs the segments before that full backup.
func (r *copyRun) segments(g group, stop error) {
	if len(g.segments) == 0 {
		return
	}
	through := int64(-1)         // -1: no full backup under the chain yet
	var bases []*backup.Manifest // the full backups the segments copied restore from
	if g.full != nil && stop == nil {
		through = g.full.Manifest.Etcd.Revision.Low
		bases = append(bases, g.full.Manifest)
	}
	whole := true
	for i := range g.segments {
		s := &g.segments[i]
		r.index++
		m := s.Manifest
		if stop == nil && r.ctx.Err() != nil {
			stop = r.ctx.Err()
		}
		if stop == nil && (through < 0 || m.FirstRevision > through+1) {
			if base := r.bridge(g.chain, m); base != nil {
				through = base.Etcd.Revision.Low
				bases = append(bases, base)
			} else if through < 0 {
				stop = fmt.Errorf("its chain's full backup %s is not on the source or not selected, and no full backup on the target continues the chain there", g.chain)
			} else {
				// The source lacks the revisions between: a segment is
				// gone or its manifest unreadable. What follows restores
				// nothing.
				stop = fmt.Errorf("%w: the source holds no segment of revisions %d to %d; the chain stops at revision %d on the target",
					ErrChainHole, through+1, m.FirstRevision-1, through)
			}
		}
		if stop != nil {
			whole = false
			r.record(Item{ID: s.ID, Kind: s.Kind, Outcome: NotCopied, Bytes: s.Size, Created: s.Created, Err: stop})
			continue
		}
		it := r.record(r.backup(s))
		switch {
		case present(it.Outcome):
			through = max(through, m.LastRevision)
		case m.LastRevision <= through:
			// Another attempt at revisions the target holds already.
			whole = false
		default:
			whole = false
			stop = fmt.Errorf("segment %s (revisions %d to %d) was not copied; the chain stops at revision %d on the target",
				s.ID, m.FirstRevision, m.LastRevision, through)
		}
	}
	ch := Chain{Full: g.chain, Segments: len(g.segments), Through: through, Whole: whole}
	if whole {
		if ch.Err = r.basesHeld(bases); ch.Err != nil {
			ch.Whole = false
		}
	}
	r.rep.Chains = append(r.rep.Chains, ch)
}

// basesHeld looks again for the full backups a chain's segments were
// copied on top of: the target's prune may have deleted one since it
// was copied or listed. A chain is reported whole only when the target
// still holds them.
func (r *copyRun) basesHeld(bases []*backup.Manifest) error {
	for _, b := range bases {
		key := backup.ClusterPrefix(b.Cluster) + backup.ManifestKey(b.DataKey)
		ctx, done := r.request()
		_, err := r.c.Target.Bucket.Stat(ctx, key)
		if err = done(err); errors.Is(err, storage.ErrNotFound) {
			return fmt.Errorf("%w: %s was deleted from the target while the chain's segments were copied (a prune of the target meanwhile?); they restore from nothing there until it is copied again", ErrChainBaseGone, b.ID)
		}
		if err != nil {
			return fmt.Errorf("look for the chain's full backup %s on the target: %w", b.ID, err)
		}
	}
	return nil
}

// bridge returns the full backup on the target with the lowest revision
// that continues chain and that segment m continues: at or after the
// revision before m's first, before its last. Nil when there is none.
func (r *copyRun) bridge(chain string, m *backup.Manifest) *backup.Manifest {
	var low *backup.Manifest
	for _, b := range r.bases {
		e := backup.Entry{Kind: backup.KindBackup, ID: b.ID, Manifest: b}
		rev := b.Etcd.Revision.Low
		if e.Continues(chain) && rev >= m.FirstRevision-1 && rev < m.LastRevision && (low == nil || rev < low.Etcd.Revision.Low) {
			low = b
		}
	}
	return low
}

// present reports whether a backup of outcome o is on the target.
func present(o Outcome) bool { return o == Copied || o == Resumed || o == Skipped }

// backup copies one backup, unless the target holds it.
func (r *copyRun) backup(e *backup.Entry) Item {
	it := Item{ID: e.ID, Kind: e.Kind, Bytes: e.Size, Created: e.Created}
	want := *e.Manifest
	want.Destination = r.c.Target.Name
	if !IsCopy(e.Manifest) || want.SourceStored.IsZero() {
		// The source's store dated the backup; a copy of a copy keeps
		// the first store's time. Not part of what the copy token
		// hashes: another store holding the backup dates it otherwise.
		want.SourceStored = time.Time{}
		if t := r.sourceTimes[e.ManifestKey]; !t.IsZero() {
			want.SourceStored = t.UTC()
		}
	}
	token, err := copyToken(&want)
	if err != nil {
		it.Outcome, it.Err = Failed, err
		return it
	}
	want.Run = token
	out, err := r.copyOnce(&want, 2)
	it.Outcome, it.Err = out, err
	if err != nil && out != Pending {
		it.Outcome = Failed
	}
	if out == Copied {
		r.rep.CopiedBytes += e.Size
	}
	return it
}

// copyOnce copies the backup want describes (the source's manifest with the
// target's name), or finishes or skips it after looking at what the target
// holds. looks is how many more looks it takes when another writer took a
// key between its look and its write: two, since another copy of the same
// backup (from another store holding it) may take the data object, then
// the manifest, each once.
func (r *copyRun) copyOnce(want *backup.Manifest, looks int) (Outcome, error) {
	var st targetState
	var err error
	if have := r.held[want.ID]; have != nil && sameBackup(have, want) {
		st = targetState{committed: true, own: ownRun(want, have.SourceStored, have.Run)}
	} else if st, err = r.inspect(want); err != nil {
		return Failed, err
	}
	switch {
	case st.committed:
		if st.own {
			// A copy with this token committed it: lock what it stopped
			// before locking, never extending a lock that expired.
			if err := r.ensureLocked(want, false); err != nil {
				return Failed, err
			}
		}
		return Skipped, nil
	case st.pending:
		return Pending, st.pendingErr
	case st.dataStored:
		if err := r.knownFields(want); err != nil {
			return Failed, err
		}
		if err := r.ensureLocked(want, true); err != nil {
			return Failed, err
		}
		resumed := want
		if st.run != "" {
			// A previous version's copy: the manifest names its data
			// object with the token the data object carries.
			w := *want
			w.Run = st.run
			resumed = &w
		}
		if err = r.commit(resumed); err == nil {
			return Resumed, nil
		}
	default:
		if err := r.knownFields(want); err != nil {
			return Failed, err
		}
		err = r.transfer(want)
		if err == nil {
			return Copied, nil
		}
	}
	if looks > 0 && errors.Is(err, backup.ErrBackupExists) && r.ctx.Err() == nil {
		return r.copyOnce(want, looks-1)
	}
	return Failed, err
}

// transfer streams the data object from the source to the target,
// verifying it on the way, and commits the manifest.
func (r *copyRun) transfer(want *backup.Manifest) error {
	key := backup.ClusterPrefix(want.Cluster) + want.DataKey
	ctx, stalled := r.watchdog()
	defer stalled.release()
	rc, err := r.c.Source.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("data object %s vanished from the source (pruned meanwhile?): %w", key, err)
	}
	if err != nil {
		return fmt.Errorf("read source: %w", err)
	}
	defer rc.Close()
	pr := &progressReader{r: rc, run: r, id: want.ID, size: want.Stored.Size, interval: r.c.ProgressInterval, step: stalled.step}
	vr := newVerifyingReader(pr, want.Stored)
	up := r.c.uploader()
	if err := up.Upload(ctx, want, vr); err != nil {
		if vr.err != nil && errors.Is(vr.err, ErrDigestMismatch) {
			return fmt.Errorf("source %s: %w", key, vr.err)
		}
		if cause := context.Cause(ctx); errors.Is(cause, backup.ErrDestinationStalled) && r.ctx.Err() == nil {
			return fmt.Errorf("upload: %w", cause)
		}
		return fmt.Errorf("upload: %w", err)
	}
	if !vr.verified() {
		// The store took the object before it was read to its end: it is
		// not proven to be the manifest's, so it is never committed.
		cctx, cancel := cleanup.Context(r.ctx, time.Minute) // bounded by a scheduler's stop budget
		defer cancel()
		derr := backup.RemoveOwnData(cctx, r.c.Target.Bucket, want)
		return errors.Join(fmt.Errorf("%w: the target stored %s before it was read to its end", ErrDigestMismatch, key), derr)
	}
	if err := r.commit(want); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// commit commits want's manifest on the target, the write bounded by the
// copier's StallTimeout (request).
func (r *copyRun) commit(want *backup.Manifest) error {
	ctx, done := r.request()
	return done(r.c.uploader().Commit(ctx, want))
}

// stallWatch cancels a transfer's context when no byte moved for the
// copier's StallTimeout, and when the upload did not end that long after
// the source's object was read to its end (the last part's request, a
// single object's write, a multipart upload's completion).
type stallWatch struct {
	t      *time.Timer
	d      time.Duration
	cancel context.CancelCauseFunc
	ended  atomic.Bool // the source's object was read to its end
}

// watchdog returns the context of one transfer and its stall watch; the
// caller releases the watch when the transfer ended.
func (r *copyRun) watchdog() (context.Context, *stallWatch) {
	d := r.c.StallTimeout
	if d <= 0 {
		return r.ctx, &stallWatch{}
	}
	ctx, cancel := context.WithCancelCause(r.ctx)
	w := &stallWatch{d: d, cancel: cancel}
	w.t = time.AfterFunc(d, func() {
		if w.ended.Load() {
			cancel(fmt.Errorf("%w: the target did not answer for %s after the data object's last byte", backup.ErrDestinationStalled, d))
			return
		}
		cancel(fmt.Errorf("%w: no byte of the transfer moved for %s", backup.ErrDestinationStalled, d))
	})
	return ctx, w
}

// step records a read of n bytes that returned err: bytes moved restart
// the watch; the end of the object (or a failed read) restarts it once
// more, for the rest of the upload, as request bounds a request.
func (w *stallWatch) step(n int, err error) {
	switch {
	case w.t == nil:
	case err != nil:
		if !w.ended.Swap(true) {
			w.t.Reset(w.d)
		}
	case n > 0:
		w.t.Reset(w.d)
	}
}

// release ends the watch and the transfer's context.
func (w *stallWatch) release() {
	if w.t != nil {
		w.t.Stop()
		w.cancel(nil)
	}
}

// progressReader reports Progress events while a data object is copied.
type progressReader struct {
	r        io.Reader
	run      *copyRun
	id       string
	size, n  int64
	interval time.Duration
	last     time.Time
	step     func(n int, err error)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	p.step(n, err)
	if p.run.c.Observer == nil {
		return n, err
	}
	interval := p.interval
	if interval <= 0 {
		interval = time.Second
	}
	if now := p.run.c.now(); now.Sub(p.last) >= interval || err != nil {
		p.last = now
		p.run.event(Event{Kind: Progress, ID: p.id, Bytes: p.n, Size: p.size})
	}
	return n, err
}
