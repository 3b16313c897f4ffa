package replicate

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
)

// Selection chooses the backups of a cluster to copy. Several fields may
// be set: what any of them selects is copied. A delta segment is never
// copied without what it restores on top of: selecting one selects its
// chain's full backup and the segments of its chain before it too.
type Selection struct {
	// IDs selects these backups. An ID the source does not hold fails the
	// copy before anything is written, with an error matching
	// storage.ErrNotFound; one that Retention or PointInTime leaves out is
	// reported NotCopied (ErrLeftOut) and Copy's error matches
	// ErrLeftOut, never skipped silently.
	IDs []string
	// Chains selects, for each full backup ID, the full backup and every
	// delta segment of the chain it started. A chain that Retention or
	// PointInTime leaves out whole is reported NotCopied (ErrLeftOut),
	// its full backup and segments, and Copy's error matches ErrLeftOut.
	Chains []string
	// All selects every backup: full, delta segment and keys-json.
	All bool
	// Since selects the backups created at or after it; zero selects none.
	Since time.Time
	// Retention, when set, narrows what the fields above select: a
	// backup this policy would delete among the source's backups of its
	// kind (retention.MakePlan over the source's listing, every name
	// counted, at the copy's now, each of Kinds counted apart: keys-json
	// backups as snapshots are) is not selected; for a full backup, nor
	// are its chain's segments, unless the chain rule keeps them: without
	// PointInTime, that of a target without a point-in-time window
	// (ChainRule(0)), which keeps a chain that reaches past the oldest
	// full backup kept (a follower's live chain) with its full backup. Give it the target's retention of
	// the copies: what that prunes is then never selected again, so no
	// copy copies back what the last prune deleted. Dates are checked
	// against the source's store times as the source's prune checks them
	// (retention.PlanOptions.ModTimes, Copies: IsCopy): a backup dated
	// long before its store wrote it (a writer's clock running slow) is
	// misdated, kept by the source's prune and the target's, and selected.
	Retention *retention.Policy
	// PointInTime, when set, narrows the selection further by the rule of
	// continuous backups: the plan above (over Retention, or the zero
	// Policy without it) has this chain rule applied, and a delta segment
	// or full backup it deletes is not selected. Give it the target's
	// point-in-time window of the copies: the segments its prune deletes
	// (those no kept restore point needs) are then not copied back, and a
	// chain whose first segments are dropped is copied on top of the full
	// backup it restores from after them (a synthetic full backup, see
	// Copier.Copy).
	PointInTime *retention.ChainPolicy
	// Name, when set, narrows the selection to the backups of that backup
	// name (OfName): fulls whose manifest names it and the delta segments
	// of that config (its follower's, whichever config's full backup their
	// chain started from), with the full backups those segments restore on
	// top of. Retention and PointInTime then count that name's alone, so that a job replicating one config keeps that
	// config's retention, whatever other configs of the cluster hold.
	Name string
	// ClockSkew is the clock skew of the plan of Retention and PointInTime
	// (retention.PlanOptions.ClockSkew); give it the target prune's. Zero
	// means retention.DefaultClockSkew.
	ClockSkew time.Duration
}

// Validate checks that the selection selects something.
func (s Selection) Validate() error {
	if len(s.IDs) == 0 && len(s.Chains) == 0 && !s.All && s.Since.IsZero() {
		return fmt.Errorf("selection is empty: name backups, chains, all, or a time")
	}
	if s.Name != "" {
		if err := backup.ValidateName("backup", s.Name); err != nil {
			return err
		}
	}
	if s.PointInTime != nil {
		if err := s.PointInTime.Validate(); err != nil {
			return err
		}
	}
	if s.Retention != nil {
		return s.Retention.Validate()
	}
	return nil
}

// of returns the entries of the selection's Name (all without one), with
// the full backups another config took that the name's segments restore
// on top of (a follower's chain started from the newest full backup of
// the cluster, whatever its config) and the segments of older versions,
// which record no config, on the chains of the name's segments (its
// follower's before an upgrade mid-chain): the other names' backups are
// otherwise never selected. A manifest that could not be parsed is kept:
// it may be the name's (see unreadable).
func (s Selection) of(entries []backup.Entry) []backup.Entry {
	if s.Name == "" {
		return entries
	}
	chains := map[string]bool{}
	for _, e := range entries {
		if e.Kind == backup.KindDelta && e.Manifest != nil && OfName(e.Manifest, s.Name) {
			chains[e.Manifest.Chain] = true
		}
	}
	return slices.DeleteFunc(slices.Clone(entries), func(e backup.Entry) bool {
		if e.Manifest == nil {
			// A manifest that could not be parsed may be the name's: it
			// is kept, to be reported (ErrInvalidSource), never skipped.
			return e.Kind != backup.KindInvalid
		}
		if OfName(e.Manifest, s.Name) {
			return false
		}
		if e.Kind == backup.KindDelta && e.Manifest.Config == "" && chains[e.Manifest.Chain] {
			// A segment of an older version on the name's chain: the
			// name's follower's, upgraded mid-chain, may be continued by
			// the name's segments.
			return false
		}
		for chain := range chains {
			if e.Continues(chain) {
				return false
			}
		}
		return true
	})
}

// pruned returns the IDs of the backups sel.Retention (and
// sel.PointInTime) would delete among the source's entries at now; nil
// without either. Without PointInTime, the plan has the chain rule of a
// target without a point-in-time window applied (ChainRule): a chain is
// selected whole while its full backup is kept or while it reaches past
// the oldest full backup kept (a follower's live chain), and dropped
// whole once it ends before it.
//
// The plan checks the backups' dates against the source's store times
// (stored, by key, as its listing gave them) and a copy's against the
// time it records (IsCopy, backup.Manifest.SourceStored), as the
// source's prune and the target's prune of the copies check them: a
// misdated backup is kept by both, so it is selected. It ages backups at
// now (retention.PlanOptions.AgeAtNow), never at the source's newest
// write: the target's store wrote the copies later, and the selection
// must never keep what the target's prune deletes (it would be copied
// back after every prune).
func (s Selection) pruned(cluster string, entries []backup.Entry, now time.Time, stored map[string]time.Time) (map[string]bool, error) {
	if s.Retention == nil && s.PointInTime == nil {
		return nil, nil
	}
	var policy retention.Policy
	if s.Retention != nil {
		policy = *s.Retention
	}
	drop := map[string]bool{}
	for _, kind := range Kinds() {
		p, err := retention.MakePlan(cluster, entries, policy, now, retention.PlanOptions{Kind: kind, ClockSkew: s.ClockSkew, Name: s.Name,
			ModTimes: stored, Copies: IsCopy, AgeAtNow: true})
		if err != nil {
			return nil, fmt.Errorf("selection's retention: %w", err)
		}
		if kind == backup.KindBackup {
			rule := ChainRule(0)
			if s.PointInTime != nil {
				rule = *s.PointInTime
			}
			if rule.FromOldestKept {
				// Its grace keeps the chains the target's store wrote
				// lately (a copy may be extending them); the selection
				// keeps no chain for the source's times.
				p.Options.ModTimes = nil
			}
			if p, err = rule.Apply(p); err != nil {
				return nil, fmt.Errorf("selection's chain rule: %w", err)
			}
		}
		for _, d := range p.Deletes() {
			if e := d.Entry; e.Kind == kind || kind == backup.KindBackup && e.Kind == backup.KindDelta {
				drop[e.ID] = true
			}
		}
	}
	return drop, nil
}

// Kinds returns the kinds of backup a copy's retention counts, each apart
// from the others (retention.PlanOptions.Kind): snapshots (with their
// chains' delta segments), keys-json and keys backups. A replication
// target's prune runs once per kind with the same policy, as
// Selection.Retention selects.
func Kinds() []backup.Kind {
	return []backup.Kind{backup.KindBackup, backup.KindKeysJSON, backup.KindKeys}
}

// ChainRule returns the chain rule a replication target's prune applies to
// the copied chains, the rule Selection.PointInTime selects by (and,
// without it, a selection with a Retention): retention.PointInTime(window)
// for a positive window; for none, retention.OldestKept: a copied chain
// stays whole while its full backup is kept, or while it reaches past the
// oldest full backup kept (a follower's live chain, whose full backup
// fell out of a keep-last), and is deleted whole once it ends before it
// and the target's store wrote none of it within the last hour
// (retention.DefaultChainGrace: a copy may be extending it right now).
func ChainRule(window time.Duration) retention.ChainPolicy {
	if window > 0 {
		return retention.PointInTime(window)
	}
	return retention.OldestKept()
}

// group is a unit of copying: a backup that stands alone (no segments), or
// a chain's full backup followed by its selected segments in revision
// order. A segment is copied only after everything before it in its group.
type group struct {
	full     *backup.Entry // nil for segments whose full is not on the source or not selected
	chain    string        // the chain's ID, for segments
	segments []backup.Entry
}

// standsAlone reports whether g's segments restore on top of g's full
// backup alone, one after the other without a gap: they can be copied
// right after it, before the full backups of later groups.
func (g group) standsAlone() bool {
	if g.full == nil || g.full.Manifest == nil {
		return false
	}
	through := g.full.Manifest.Etcd.Revision.Low
	for _, s := range g.segments {
		if s.Manifest.FirstRevision > through+1 {
			return false
		}
		through = max(through, s.Manifest.LastRevision)
	}
	return true
}

// plan returns the groups to copy, oldest first, from what the source
// lists. Entries that are not backups (legacy, orphan, invalid, foreign)
// are never copied.
func plan(entries []backup.Entry, sel Selection, drop map[string]bool) ([]group, error) {
	byID := map[string]backup.Entry{}
	chains := map[string][]backup.Entry{} // chain ID -> segments
	for _, e := range entries {
		switch e.Kind {
		case backup.KindBackup, backup.KindKeysJSON, backup.KindKeys:
			byID[e.ID] = e
		case backup.KindDelta:
			byID[e.ID] = e
			chains[e.Manifest.Chain] = append(chains[e.Manifest.Chain], e)
		}
	}
	for _, segs := range chains {
		slices.SortStableFunc(segs, func(a, b backup.Entry) int {
			if c := cmpInt(a.Manifest.FirstRevision, b.Manifest.FirstRevision); c != 0 {
				return c
			}
			return a.Created.Compare(b.Created)
		})
	}

	selected := map[string]bool{}
	for _, id := range sel.IDs {
		if _, ok := byID[id]; !ok {
			return nil, fmt.Errorf("backup %q: %w", id, storage.ErrNotFound)
		}
		selected[id] = true
	}
	for _, id := range sel.Chains {
		e, ok := byID[id]
		if !ok || e.Kind != backup.KindBackup {
			return nil, fmt.Errorf("chain %q: no full backup of that ID: %w", id, storage.ErrNotFound)
		}
		selected[id] = true
		for _, s := range chains[id] {
			selected[s.ID] = true
		}
	}
	for id, e := range byID {
		if sel.All || !sel.Since.IsZero() && !e.Created.Before(sel.Since) {
			selected[id] = true
		}
	}
	// What the retention would delete (see Selection.pruned).
	for id := range drop {
		delete(selected, id)
	}
	// A selected segment brings its full and the segments before it,
	// but for what the retention deletes: no kept restore point needs it.
	for chain, segs := range chains {
		last := -1
		for i, s := range segs {
			if selected[s.ID] {
				last = i
			}
		}
		for _, s := range segs[:last+1] {
			selected[s.ID] = !drop[s.ID]
		}
		if last >= 0 {
			if _, ok := byID[chain]; ok && !drop[chain] {
				selected[chain] = true
			}
		}
	}
	return groups(entries, byID, chains, selected), nil
}

// groups builds the groups of the selected backups, oldest first.
func groups(entries []backup.Entry, byID map[string]backup.Entry, chains map[string][]backup.Entry, selected map[string]bool) []group {
	var out []group
	for _, e := range entries {
		if !selected[e.ID] || e.Kind == backup.KindDelta {
			continue
		}
		g := group{full: &e}
		for _, s := range chains[e.ID] {
			if selected[s.ID] {
				g.chain = e.ID
				g.segments = append(g.segments, s)
			}
		}
		out = append(out, g)
	}
	// Segments of a chain whose full the source no longer holds, or the
	// selection left out (retention deletes it: the segments kept restore
	// on top of a synthetic full backup).
	var orphaned []string
	for chain := range chains {
		if _, ok := byID[chain]; !ok || !selected[chain] {
			orphaned = append(orphaned, chain)
		}
	}
	slices.Sort(orphaned)
	for _, chain := range orphaned {
		g := group{chain: chain}
		for _, s := range chains[chain] {
			if selected[s.ID] {
				g.segments = append(g.segments, s)
			}
		}
		if len(g.segments) > 0 {
			out = append(out, g)
		}
	}
	return out
}

// sameBackup reports whether a and b describe the same stored backup:
// the same ID, data object and digests, whatever destination each names
// and whenever each was committed (a backup fanned out to two
// destinations is one backup on both).
func sameBackup(a, b *backup.Manifest) bool {
	return a.ID == b.ID && a.Cluster == b.Cluster && a.DataKey == b.DataKey && a.Kind == b.Kind &&
		a.Stored == b.Stored && a.Raw == b.Raw && a.Compression == b.Compression &&
		a.Chain == b.Chain && a.FirstRevision == b.FirstRevision && a.LastRevision == b.LastRevision &&
		a.Created.Equal(b.Created) && recipients(a) == recipients(b)
}

func recipients(m *backup.Manifest) string {
	if m.Encryption == nil {
		return ""
	}
	return m.Encryption.Scheme + ":" + strings.Join(m.Encryption.Recipients, ",")
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
