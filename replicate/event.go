package replicate

import (
	"errors"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
)

// Outcome is what became of one backup in a copy.
type Outcome string

// The outcomes of a backup in a copy.
const (
	// Copied: its objects were copied and its manifest committed on the
	// target.
	Copied Outcome = "copied"
	// Resumed: its data object was on the target already (an earlier copy
	// stopped before its commit) and verified; its manifest was committed.
	Resumed Outcome = "resumed"
	// Skipped: the target held it already, committed.
	Skipped Outcome = "skipped"
	// Failed: it could not be copied; nothing of it was committed.
	Failed Outcome = "failed"
	// Pending: its data object is on the target without a manifest,
	// written by another writer (a backup run fanned out to the target
	// too, or a copy under another target name) that may still commit
	// it. The copy leaves it alone; the next copy finds it committed, or
	// copies it once retention collected the orphan. Not an error.
	Pending Outcome = "pending"
	// NotCopied: it was not tried, because something it depends on (its
	// chain's full backup, an earlier segment) was not copied: copying it
	// would leave a chain with a hole on the target; or because the
	// selection leaves out a backup it names (ErrLeftOut); or because it
	// is a manifest on the source this version cannot read
	// (ErrInvalidSource, Item.InvalidSource).
	NotCopied Outcome = "not-copied"
)

// Item is the outcome of one backup of a copy.
type Item struct {
	ID string
	// Kind is backup.KindBackup, KindDelta, KindKeysJSON or KindKeys;
	// backup.KindInvalid for a source manifest this version cannot read
	// (ErrInvalidSource), whose ID is the manifest's file name.
	Kind    backup.Kind
	Outcome Outcome
	// Bytes is the stored size of its data object.
	Bytes int64
	// Created is when the backup was taken (its manifest's).
	Created time.Time
	// Err says why it Failed or was NotCopied.
	Err error
}

// InvalidSource reports whether it is a manifest on the source this
// version cannot read (ErrInvalidSource): not copied, and not a backup
// the target lags behind on.
func (it Item) InvalidSource() bool { return errors.Is(it.Err, ErrInvalidSource) }

// Chain describes a chain of delta segments after a copy: how far the
// target holds it contiguously from its full backup.
type Chain struct {
	// Full is the ID of the chain's full backup.
	Full string
	// Segments is the number of the chain's segments selected.
	Segments int
	// Through is the last revision the target holds of the chain, copied
	// in this run or before, without a segment missing in between.
	Through int64
	// Whole reports whether every selected segment is on the target, on
	// top of the full backups it restores from.
	Whole bool
	// Err says why a chain is not whole when no item of the report does:
	// its full backup, copied or found on the target, was gone from the
	// target when its segments were copied (ErrChainBaseGone). Nil
	// otherwise.
	Err error
}

// Report is the outcome of a copy.
type Report struct {
	Cluster string
	// Source and Target are the names of the two destinations.
	Source, Target string
	// Name is the selection's backup name (Selection.Name); empty when
	// it selected every name's.
	Name   string
	Items  []Item
	Chains []Chain
	// CopiedBytes counts the bytes read from the source and written.
	CopiedBytes int64
	Elapsed     time.Duration
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

// EventKind names what an Event reports.
type EventKind string

// The kinds of events of a copy.
const (
	// Planned: the selection is known; Total is the number of backups.
	Planned EventKind = "planned"
	// Progress: Bytes of the backup ID were copied so far.
	Progress EventKind = "progress"
	// Done: the backup ID's outcome is known (Item).
	Done EventKind = "done"
)

// Event reports the progress of a copy to an Observer.
type Event struct {
	Kind    EventKind
	Time    time.Time
	Cluster string
	// Source and Target name the copy's destinations (Copier.SourceName
	// and Target.Name): a replication job copies to several targets in
	// turn.
	Source, Target string
	// ID is the backup the event is about (Progress, Done).
	ID string
	// Total is the number of backups selected (Planned); Index the
	// position of ID among them, from 1.
	Total, Index int
	// Bytes copied so far of ID, and its stored size (Progress).
	Bytes, Size int64
	// Item is the backup's outcome (Done).
	Item *Item
}

// Observer receives a copy's events, from the goroutine that runs it.
type Observer interface {
	Observe(Event)
}

// ObserverFunc is an Observer that is a function.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }
