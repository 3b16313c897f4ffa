package replicate

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage"
)

// Selection chooses the backups of a cluster to copy. Several fields may
// be set: what any of them selects is copied. A delta segment is never
// copied without what it restores on top of: selecting one selects its
// chain's full backup and the segments of its chain before it too.
type Selection struct {
	// IDs selects these backups. An ID the source does not hold fails the
	// copy before anything is written, with an error matching
	// storage.ErrNotFound.
	IDs []string
	// Chains selects, for each full backup ID, the full backup and every
	// delta segment of the chain it started.
	Chains []string
	// All selects every backup: full, delta segment and keys-json.
	All bool
	// Since selects the backups created at or after it; zero selects none.
	Since time.Time
}

// Validate checks that the selection selects something.
func (s Selection) Validate() error {
	if len(s.IDs) == 0 && len(s.Chains) == 0 && !s.All && s.Since.IsZero() {
		return fmt.Errorf("selection is empty: name backups, chains, all, or a time")
	}
	return nil
}

// group is a unit of copying: a backup that stands alone (no segments), or
// a chain's full backup followed by its selected segments in revision
// order. A segment is copied only after everything before it in its group.
type group struct {
	full     *backup.Entry // nil for segments whose full is not on the source
	chain    string        // the chain's ID, for segments
	segments []backup.Entry
}

// plan returns the groups to copy, oldest first, from what the source
// lists. Entries that are not backups (legacy, orphan, invalid, foreign)
// are never copied.
func plan(entries []backup.Entry, sel Selection) ([]group, error) {
	byID := map[string]backup.Entry{}
	chains := map[string][]backup.Entry{} // chain ID -> segments
	for _, e := range entries {
		switch e.Kind {
		case backup.KindBackup, backup.KindKeysJSON:
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
	// A selected segment brings its full and the segments before it.
	for chain, segs := range chains {
		last := -1
		for i, s := range segs {
			if selected[s.ID] {
				last = i
			}
		}
		for _, s := range segs[:last+1] {
			selected[s.ID] = true
		}
		if last >= 0 {
			if _, ok := byID[chain]; ok {
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
	// Segments of a chain whose full the source no longer holds.
	var orphaned []string
	for chain := range chains {
		if _, ok := byID[chain]; !ok {
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
