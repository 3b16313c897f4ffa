package retention

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage"
)

// Retainer prunes one cluster's backups on one destination. *Pruner is the
// implementation; a host may substitute its own.
type Retainer interface {
	Prune(ctx context.Context, cluster string) (*Report, error)
}

// Store is what pruning needs from a destination: list and read (to find
// the backups) and delete. A destination's bucket has it. When the store
// also implements storage.Locker, object locks are honoured, and legal
// holds when it implements storage.LegalHolder; when it
// implements storage.UploadCleaner, stale incomplete uploads are collected;
// when it has a ReadOnly() bool method that returns true, pruning refuses
// with storage.ErrReadOnly.
type Store interface {
	List(ctx context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error]
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	Delete(ctx context.Context, key string) error
}

// Pins tells whether a backup is in use by a restore running now, so that
// retention leaves it alone. A host shares one Pins between its restores
// and its pruners.
type Pins interface {
	Pinned(cluster, id string) bool
}

// Pruner applies a Policy to the folders of one destination.
type Pruner struct {
	// Store is the destination. Required.
	Store Store
	// Destination names it in reports and logs.
	Destination string
	// Policy says what to keep.
	Policy Policy
	// Name, when set, prunes the backups of one backup config only (see
	// PlanOptions.Name): give each config's policy its own Pruner.Name.
	Name string
	// Scope, when set, prunes only the backups whose manifest it accepts
	// (see PlanOptions.Scope).
	Scope func(*backup.Manifest) bool
	// Copies, when set, tells the copies among the backups (see
	// PlanOptions.Copies): a replication target's prune checks their
	// dates against when the source's store wrote them, which they
	// record, not against when this store did.
	Copies func(*backup.Manifest) bool
	// Kind is the kind of backup the policy counts (see PlanOptions.Kind):
	// snapshots by default, or keys-json backups.
	Kind backup.Kind
	// Chains, when set, applies the rule of continuous backups to the plan
	// (see ChainPolicy); without it delta segments are never deleted, and
	// neither is any full backup a delta segment's chain starts from.
	Chains *ChainPolicy
	// OrphanGrace: see PlanOptions.
	OrphanGrace time.Duration
	// UploadGrace is how old an incomplete multipart upload of one of this
	// library's keys must be before it is aborted. Zero means
	// DefaultUploadGrace.
	UploadGrace time.Duration
	// ClockSkew: see PlanOptions.
	ClockSkew time.Duration
	// Pins, when set, protects backups a restore is reading.
	Pins Pins
	// DryRun plans and reports without deleting anything. It makes every
	// check a real run makes (a read-only destination fails both).
	DryRun bool
	// Metrics, when set, records each report (see Metrics).
	Metrics *Metrics
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Logger logs each deletion; nil means silent.
	Logger *slog.Logger
}

// DefaultUploadGrace is the default Pruner.UploadGrace.
const DefaultUploadGrace = 24 * time.Hour

var _ Retainer = (*Pruner)(nil)

// Outcome is what pruning did with one entry.
type Outcome string

// The outcomes of a report.
const (
	Kept    Outcome = "kept"
	Deleted Outcome = "deleted"
	// Skipped: the plan said delete, but an invariant of execution
	// forbade it (an object lock, a pin) or the deletion failed.
	Skipped Outcome = "skipped"
	// WouldDelete: the plan said delete, in a dry run.
	WouldDelete Outcome = "would-delete"
)

// Item is one line of a Report.
type Item struct {
	Entry   backup.Entry
	Outcome Outcome
	Reason  string
	// Skip says, for a Skipped item, why, in a word fit for a metric
	// label: SkipLocked, SkipPinned, SkipLockUnreadable or
	// SkipDeleteFailed; empty when the context ended the run.
	Skip string
}

// The reasons of Item.Skip. SkipLocked and SkipPinned are retention
// working as it should; SkipLockUnreadable and SkipDeleteFailed mean
// retention could not do its work, and make Prune fail.
const (
	SkipLocked         = "locked"
	SkipPinned         = "pinned"
	SkipLockUnreadable = "lock-unreadable"
	SkipDeleteFailed   = "delete-failed"
)

// ErrSkipped matches the error of a Prune, Teardown or Delete that left
// entries it was to delete because it could not check or delete them (an
// object lock status it may not read, a deletion the store refused): left
// alone, retention would stop deleting while the bucket grows.
var ErrSkipped = errors.New("retention skipped entries it could not check or delete")

// Report is the result of one Prune: every entry with its outcome and
// reason, and the incomplete uploads aborted.
type Report struct {
	Cluster     string
	Destination string
	DryRun      bool
	Plan        *Plan
	Items       []Item
	// AbortedUploads are the incomplete uploads aborted (or, in a dry
	// run, that would be).
	AbortedUploads []storage.Upload
}

// Count returns how many items had outcome o.
func (r *Report) Count(o Outcome) int {
	n := 0
	for _, it := range r.Items {
		if it.Outcome == o {
			n++
		}
	}
	return n
}

// ErrNoStore is returned by a Pruner without a Store.
var ErrNoStore = errors.New("pruner has no store")

// Prune lists the cluster's folder, plans with the Pruner's policy and
// deletes what the plan says, holding to the invariants that no plan can
// lift: objects under an unexpired object lock and pinned backups are
// skipped and reported; a backup's manifest is deleted before its data, so
// a crash in between leaves an orphan (collected later), never a manifest
// pointing at nothing. An error is returned when the folder cannot be
// listed, or an entry to delete could not be checked or deleted (ErrSkipped:
// an object lock status the store would not give, a deletion it refused);
// the report then holds what was done. The plan is given the store's
// modification times of the listing, so that dates and ages are checked
// against the store's clock.
func (p *Pruner) Prune(ctx context.Context, cluster string) (*Report, error) {
	if p.Store == nil {
		return nil, ErrNoStore
	}
	if err := backup.ValidateName("cluster", cluster); err != nil {
		return nil, err
	}
	// A dry run makes every check a real run does: it predicts the run.
	if ro, ok := p.Store.(interface{ ReadOnly() bool }); ok && ro.ReadOnly() {
		return nil, fmt.Errorf("prune %s on %s: %w", cluster, p.Destination, storage.ErrReadOnly)
	}
	listing := &recordingCatalog{Catalog: p.Store, mod: map[string]time.Time{}}
	entries, err := backup.ListBackups(ctx, listing, cluster)
	if err != nil {
		return nil, err
	}
	now := p.now()
	plan, err := MakePlan(cluster, entries, p.Policy, now,
		PlanOptions{OrphanGrace: p.OrphanGrace, Name: p.Name, Scope: p.Scope, Copies: p.Copies, Kind: p.Kind, ClockSkew: p.ClockSkew, ModTimes: listing.mod})
	if err != nil {
		return nil, err
	}
	if p.Chains != nil {
		if plan, err = p.Chains.Apply(plan); err != nil {
			return nil, err
		}
	} else {
		plan = keepChainBases(plan)
	}
	report := &Report{Cluster: cluster, Destination: p.Destination, DryRun: p.DryRun, Plan: plan}
	for _, d := range plan.Decisions {
		item := Item{Entry: d.Entry, Outcome: Kept, Reason: d.Reason}
		if d.Action == Delete {
			item = p.execute(ctx, d, now)
		}
		report.Items = append(report.Items, item)
	}
	var errs []error
	if err := p.collectUploads(ctx, cluster, now, latest(listing.mod), report); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, report.skipErrors(ctx)...)
	if p.Metrics != nil {
		p.Metrics.Record(report)
	}
	return report, errors.Join(errs...)
}

// skipErrors returns an error per item that was skipped because it could
// not be checked or deleted, and the context's error when it ended the
// run before everything was done.
func (r *Report) skipErrors(ctx context.Context) []error {
	var errs []error
	skipped := false
	for _, it := range r.Items {
		skipped = skipped || it.Outcome == Skipped
		if it.Outcome == Skipped && (it.Skip == SkipLockUnreadable || it.Skip == SkipDeleteFailed) {
			errs = append(errs, fmt.Errorf("%w: %s: %s", ErrSkipped, it.Entry.Key, it.Reason))
		}
	}
	if err := ctx.Err(); err != nil && skipped {
		errs = append(errs, err)
	}
	return errs
}

// recordingCatalog lists through a store and keeps the modification time
// of every object listed: the store's clock, for the plan.
type recordingCatalog struct {
	backup.Catalog
	mod map[string]time.Time
}

func (c *recordingCatalog) List(ctx context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error] {
	return func(yield func(storage.ObjectInfo, error) bool) {
		for info, err := range c.Catalog.List(ctx, prefix) {
			if err == nil && !info.ModTime.IsZero() {
				c.mod[info.Key] = info.ModTime
			}
			if !yield(info, err) {
				return
			}
		}
	}
}

// execute carries out one delete decision.
func (p *Pruner) execute(ctx context.Context, d Decision, now time.Time) Item {
	e := d.Entry
	item := Item{Entry: e, Outcome: Skipped}
	// Every kind: a fetch pins a keys-json backup as a restore pins a
	// snapshot, and an orphan's name is its ID.
	if p.Pins != nil && p.Pins.Pinned(e.Cluster, e.ID) {
		item.Reason, item.Skip = "pinned by a restore or fetch in progress", SkipPinned
		return item
	}
	keys := objectKeys(e)
	// Every key is checked before any is deleted: a lock on the data
	// object must not cost the backup its manifest.
	for _, key := range keys {
		if reason, skip := p.lockOf(ctx, key, now); skip != "" || reason != "" {
			item.Reason, item.Skip = reason, skip
			return item
		}
	}
	if p.DryRun {
		item.Outcome, item.Reason = WouldDelete, d.Reason
		return item
	}
	// The lock lookups above take round trips: a restore may have pinned
	// the backup meanwhile. Check again, and hold new pins off until the
	// deletes end.
	if h, ok := p.Pins.(deleteHolder); ok {
		release, ok := h.holdForDelete(e.Cluster, e.ID)
		if !ok {
			item.Reason, item.Skip = "pinned by a restore or fetch in progress", SkipPinned
			return item
		}
		defer release()
	}
	for n, key := range keys {
		err := p.Store.Delete(ctx, key)
		switch {
		case errors.Is(err, storage.ErrLocked):
			item.Reason, item.Skip = fmt.Sprintf("object lock refused the deletion of %s", key), SkipLocked
			if n > 0 {
				item.Reason += " (its manifest is gone: the data object is an orphan until the lock expires)"
			}
			return item
		case err != nil:
			item.Reason, item.Skip = fmt.Sprintf("delete failed on %s: %v", key, err), SkipDeleteFailed
			if ctx.Err() != nil {
				item.Skip = ""
			}
			return item
		}
	}
	p.logger().Info("deleted backup", "cluster", e.Cluster, "destination", p.Destination, "id", e.ID, "kind", e.Kind, "reason", d.Reason)
	item.Outcome, item.Reason = Deleted, d.Reason
	return item
}

// lockOf reports why key may not be deleted: an object lock in force (by
// the injected clock or the store's, which is the one the store enforces)
// or a legal hold, with SkipLocked; a lock that could not be read, with
// SkipLockUnreadable (no Skip when the context ended). Empty when the
// store has no locks or key has none.
func (p *Pruner) lockOf(ctx context.Context, key string, now time.Time) (reason, skip string) {
	unreadable := func(err error) (string, string) {
		if ctx.Err() != nil {
			return fmt.Sprintf("object lock of %s could not be read: %v", key, err), "" // cancelled, not refused: Prune returns the context's error
		}
		return fmt.Sprintf("object lock of %s could not be read: %v", key, err), SkipLockUnreadable
	}
	absent := func(err error) bool {
		return errors.Is(err, storage.ErrUnsupported) || errors.Is(err, storage.ErrNotFound)
	}
	if locker, ok := p.Store.(storage.Locker); ok {
		r, err := locker.Retention(ctx, key)
		switch {
		case errors.Is(err, storage.ErrUnsupported):
			return "", "" // no object lock on the bucket: no legal hold either
		case absent(err):
		case err != nil:
			return unreadable(err)
		case r.Active(now) || r.Active(time.Now()):
			return fmt.Sprintf("object lock (%s) until %s", r.Mode, r.Until.UTC().Format(time.RFC3339)), SkipLocked
		}
	}
	if holder, ok := p.Store.(storage.LegalHolder); ok {
		held, err := holder.LegalHold(ctx, key)
		switch {
		case absent(err):
		case err != nil:
			return unreadable(err)
		case held:
			return fmt.Sprintf("locked (legal hold on %s)", key), SkipLocked
		}
	}
	return "", ""
}

// objectKeys returns the keys of an entry's objects, manifest first, so
// that a backup vanishes before its data. An invalid entry whose manifest
// was read (its data object is missing, or not the size the manifest
// says) has its data object too: the catalog lists the pair as one entry.
func objectKeys(e backup.Entry) []string {
	if e.ManifestKey == "" {
		return []string{e.Key}
	}
	keys := []string{e.ManifestKey}
	if e.Key != e.ManifestKey {
		keys = append(keys, e.Key)
	}
	if e.Kind == backup.KindInvalid && e.Manifest != nil && e.Manifest.DataKey != "" {
		if data := backup.ClusterPrefix(e.Cluster) + e.Manifest.DataKey; !slices.Contains(keys, data) && backup.ManifestKey(data) == e.ManifestKey {
			keys = append(keys, data)
		}
	}
	return keys
}

// collectUploads aborts this library's incomplete uploads in the cluster's
// folder that are older than the upload grace by now, and by the store's
// clock where the store confirms it: storeNow (the newest modification
// time listed, zero when unknown) and the starts of the other uploads are
// times the store has reached; when one is after an upload's start, the
// upload is aged by it too (see age).
func (p *Pruner) collectUploads(ctx context.Context, cluster string, now, storeNow time.Time, report *Report) error {
	uc, ok := p.Store.(storage.UploadCleaner)
	if !ok {
		return nil
	}
	grace := p.UploadGrace
	if grace <= 0 {
		grace = DefaultUploadGrace
	}
	prefix := backup.ClusterPrefix(cluster)
	var ours []storage.Upload
	for u, err := range uc.IncompleteUploads(ctx, prefix) {
		if errors.Is(err, storage.ErrUnsupported) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list incomplete uploads: %w", err)
		}
		name, ok := strings.CutPrefix(u.Key, prefix)
		if !ok || strings.Contains(name, "/") || !backup.IsDataName(name) && !strings.HasSuffix(name, backup.ManifestSuffix) {
			continue // not ours
		}
		ours = append(ours, u)
	}
	var stale []storage.Upload
	for i, u := range ours {
		store := storeNow
		for j, o := range ours {
			if j != i && o.Initiated.After(store) {
				store = o.Initiated
			}
		}
		if age(u.Initiated, now, store) >= grace {
			stale = append(stale, u)
		}
	}
	for _, u := range stale {
		if !p.DryRun {
			if err := uc.AbortUpload(ctx, u); err != nil {
				return fmt.Errorf("abort upload of %s: %w", u.Key, err)
			}
		}
		report.AbortedUploads = append(report.AbortedUploads, u)
	}
	return nil
}

// age is how old an object stored at is: by now, the pruner's clock, and by
// storeNow, a time the store reached by other objects, when that is after
// at. Only a store time after the object confirms the store's clock: the
// newest object of a quiet folder is aged by the pruner's clock alone.
func age(at, now, storeNow time.Time) time.Duration {
	a := now.Sub(at)
	if storeNow.After(at) {
		a = min(a, storeNow.Sub(at))
	}
	return a
}

func (p *Pruner) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Pruner) logger() *slog.Logger {
	if p.Logger != nil {
		return p.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// ErrNotDeleted matches a Delete refused or left undone: the backup is not
// there, a chain depends on it, its object lock holds, or a restore has it
// pinned. The message says which.
var ErrNotDeleted = errors.New("backup not deleted")

// Delete deletes the backup id of cluster, as Prune deletes what its plan
// says (manifest first, then data; never a locked or pinned backup;
// nothing on a read-only destination; nothing outside the cluster's
// folder), whatever the Policy. It refuses a delta segment, and a full
// backup that delta segments start from: retention prunes chains whole.
// With DryRun it says what it would do.
func (p *Pruner) Delete(ctx context.Context, cluster, id string) (Item, error) {
	if p.Store == nil {
		return Item{}, ErrNoStore
	}
	if err := backup.ValidateName("cluster", cluster); err != nil {
		return Item{}, err
	}
	if ro, ok := p.Store.(interface{ ReadOnly() bool }); ok && ro.ReadOnly() {
		return Item{}, fmt.Errorf("delete %s on %s: %w", id, p.Destination, storage.ErrReadOnly)
	}
	entries, err := backup.ListBackups(ctx, p.Store, cluster)
	if err != nil {
		return Item{}, err
	}
	var target *backup.Entry
	for i, e := range entries {
		switch {
		case e.ID == id && (e.Kind == backup.KindBackup || e.Kind.Logical()):
			target = &entries[i]
		case e.ID == id:
			return Item{}, fmt.Errorf("%w: %s is a %s entry, not a backup", ErrNotDeleted, id, e.Kind)
		case e.Kind == backup.KindDelta && e.Manifest != nil && e.Manifest.Chain == id:
			return Item{}, fmt.Errorf("%w: delta segments of continuous backup start from %s (prune with a point-in-time window instead)", ErrNotDeleted, id)
		}
	}
	if target == nil {
		return Item{}, fmt.Errorf("%w: no backup %s of cluster %s on %s", ErrNotDeleted, id, cluster, p.Destination)
	}
	for _, e := range entries {
		if e.Kind == backup.KindDelta && e.Manifest != nil && target.Continues(e.Manifest.Chain) {
			return Item{}, fmt.Errorf("%w: delta segments of continuous backup continue from %s (prune with a point-in-time window instead)", ErrNotDeleted, id)
		}
	}
	item := p.execute(ctx, Decision{Entry: *target, Action: Delete, Reason: "deleted on request"}, p.now())
	if item.Outcome == Skipped {
		return item, fmt.Errorf("%w: %s: %s", ErrNotDeleted, id, item.Reason)
	}
	return item, nil
}
