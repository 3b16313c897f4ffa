package retention

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
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
// also implements storage.Locker, object locks are honoured; when it
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
	// Pins, when set, protects backups a restore is reading.
	Pins Pins
	// DryRun plans and reports without deleting anything. It makes every
	// check a real run makes (a read-only destination fails both).
	DryRun bool
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
}

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
// listed or a deletion fails; the report then holds what was done.
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
	entries, err := backup.ListBackups(ctx, p.Store, cluster)
	if err != nil {
		return nil, err
	}
	now := p.now()
	plan, err := MakePlan(cluster, entries, p.Policy, now, PlanOptions{OrphanGrace: p.OrphanGrace, Name: p.Name, Kind: p.Kind})
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
	var errs []error
	for _, d := range plan.Decisions {
		item := Item{Entry: d.Entry, Outcome: Kept, Reason: d.Reason}
		if d.Action == Delete {
			item = p.execute(ctx, d, now)
			if item.Outcome == Skipped && ctx.Err() != nil {
				errs = append(errs, ctx.Err())
			}
		}
		report.Items = append(report.Items, item)
	}
	if err := p.collectUploads(ctx, cluster, now, report); err != nil {
		errs = append(errs, err)
	}
	for _, it := range report.Items {
		if it.Outcome == Skipped && strings.HasPrefix(it.Reason, "delete failed") {
			errs = append(errs, fmt.Errorf("%s: %s", it.Entry.Key, it.Reason))
		}
	}
	return report, errors.Join(errs...)
}

// execute carries out one delete decision.
func (p *Pruner) execute(ctx context.Context, d Decision, now time.Time) Item {
	e := d.Entry
	item := Item{Entry: e, Outcome: Skipped}
	if p.Pins != nil && (e.Kind == backup.KindBackup || e.Kind == backup.KindDelta) && p.Pins.Pinned(e.Cluster, e.ID) {
		item.Reason = "pinned by a restore in progress"
		return item
	}
	keys := []string{e.Key}
	if e.ManifestKey != "" {
		keys = []string{e.ManifestKey, e.Key} // manifest first: the backup vanishes before its data
	}
	if locker, ok := p.Store.(storage.Locker); ok {
		for _, key := range keys {
			r, err := locker.Retention(ctx, key)
			switch {
			case errors.Is(err, storage.ErrUnsupported), errors.Is(err, storage.ErrNotFound):
			case err != nil:
				item.Reason = fmt.Sprintf("object lock of %s could not be read: %v", key, err)
				return item
			case r.Active(now) || r.Active(time.Now()):
				// The store enforces locks by its own clock, not by the
				// injected one: skip if either says the lock holds.
				item.Reason = fmt.Sprintf("object lock (%s) until %s", r.Mode, r.Until.UTC().Format(time.RFC3339))
				return item
			}
		}
	}
	if p.DryRun {
		item.Outcome, item.Reason = WouldDelete, d.Reason
		return item
	}
	for n, key := range keys {
		err := p.Store.Delete(ctx, key)
		switch {
		case errors.Is(err, storage.ErrLocked):
			item.Reason = fmt.Sprintf("object lock refused the deletion of %s", key)
			if n > 0 {
				item.Reason += " (its manifest is gone: the data object is an orphan until the lock expires)"
			}
			return item
		case err != nil:
			item.Reason = fmt.Sprintf("delete failed on %s: %v", key, err)
			return item
		}
	}
	p.logger().Info("deleted backup", "cluster", e.Cluster, "destination", p.Destination, "id", e.ID, "kind", e.Kind, "reason", d.Reason)
	item.Outcome, item.Reason = Deleted, d.Reason
	return item
}

// collectUploads aborts this library's incomplete uploads in the cluster's
// folder that are older than the upload grace.
func (p *Pruner) collectUploads(ctx context.Context, cluster string, now time.Time, report *Report) error {
	uc, ok := p.Store.(storage.UploadCleaner)
	if !ok {
		return nil
	}
	grace := p.UploadGrace
	if grace <= 0 {
		grace = DefaultUploadGrace
	}
	prefix := backup.ClusterPrefix(cluster)
	var stale []storage.Upload
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
		if now.Sub(u.Initiated) >= grace {
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
		case e.ID == id && (e.Kind == backup.KindBackup || e.Kind == backup.KindKeysJSON):
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
	item := p.execute(ctx, Decision{Entry: *target, Action: Delete, Reason: "deleted on request"}, p.now())
	if item.Outcome == Skipped {
		return item, fmt.Errorf("%w: %s: %s", ErrNotDeleted, id, item.Reason)
	}
	return item, nil
}
