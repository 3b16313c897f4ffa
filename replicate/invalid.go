package replicate

import (
	"errors"
	"path"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
)

// unreadable returns the entries of the source listed backup.KindInvalid
// that sel selects by All or Since: manifests this version cannot read,
// or whose data object was missing or of another size (ErrInvalidSource).
// entries are the source's, narrowed to sel's name (Selection.of);
// fulls are the source's full backups by ID, of every name. Each
// is dated (Created) by its manifest's creation time when that can be
// read, leniently if need be (backup.Entry.Unverified), else by when the
// store wrote it. An entry is left out when
//   - its manifest vanished while the source was listed (a prune deleted
//     it): the source no longer holds it;
//   - its data object is there now, of the manifest's size: a backup
//     committed while the listing ran (a store that lists in no order, a
//     file destination, can list the manifest and not the data object);
//   - sel.Name is set and the manifest, read leniently, is another
//     name's (see ownedBy);
//   - sel.Retention or sel.PointInTime is set and it is dated before
//     oldest, the oldest backup the selection copies: the plan drops
//     backups that old. When the selection copies nothing (oldest is
//     zero), it is kept: it may be all the name's backups.
func (r *copyRun) unreadable(entries []backup.Entry, sel Selection, fulls map[string]*backup.Manifest, oldest time.Time) []backup.Entry {
	var out []backup.Entry
	for _, e := range entries {
		if e.Kind != backup.KindInvalid || e.ManifestKey == "" || errors.Is(e.Problem, storage.ErrNotFound) {
			continue
		}
		m := e.Manifest // parsed and valid; Selection.of kept it as the name's
		if m != nil && backup.ManifestKey(m.DataKey) == path.Base(e.ManifestKey) && r.committedMeanwhile(m) {
			continue
		}
		if m == nil {
			m = e.Unverified
			if sel.Name != "" && m != nil && !ownedBy(m, r.cluster, sel.Name, fulls, entries) {
				continue
			}
		}
		if m != nil && !m.Created.IsZero() {
			e.Created = m.Created
		}
		switch {
		case (sel.Retention != nil || sel.PointInTime != nil) && !oldest.IsZero() && e.Created.Before(oldest):
		case sel.All || !sel.Since.IsZero() && !e.Created.Before(sel.Since):
			out = append(out, e)
		}
	}
	return out
}

// ownedBy reports whether the leniently read manifest m may be of backup
// name. A delta segment (or a manifest naming a chain, whatever its kind
// decoded to) is the name's when it records that config; recording none
// (an older version's), when its chain's full backup (among fulls, the
// source's by ID) is the name's, or the name's segments (among entries,
// the name's) continue its chain, or, its full backup gone, its chain's
// ID carries the name (retention.ChainName), or tells nothing. Another
// manifest is the name's when it names that name or config, or neither.
func ownedBy(m *backup.Manifest, cluster, name string, fulls map[string]*backup.Manifest, entries []backup.Entry) bool {
	if m.Kind == backup.ManifestKindDelta || m.Chain != "" {
		if m.Config != "" {
			return m.Config == name
		}
		for _, e := range entries {
			if e.Kind == backup.KindDelta && e.Manifest.Chain == m.Chain && OfName(e.Manifest, name) {
				return true
			}
		}
		if full := fulls[m.Chain]; full != nil {
			return OfName(full, name)
		}
		chainName := retention.ChainName(cluster, m.Chain)
		return chainName == "" || chainName == name
	}
	if m.Name == "" && m.Config == "" {
		return true
	}
	return m.Name == name || m.Config == name
}

// committedMeanwhile reports whether the data object m names is on the
// source now, of m's size: listed missing (or of another size) only
// because its backup committed while the listing ran.
func (r *copyRun) committedMeanwhile(m *backup.Manifest) bool {
	key := backup.ClusterPrefix(r.cluster) + m.DataKey
	ctx, stalled := r.watchdog()
	defer stalled.release()
	for info, err := range r.c.Source.List(ctx, key) {
		if err != nil {
			return false
		}
		if info.Key == key {
			return info.Size == m.Stored.Size
		}
	}
	return false
}

// oldestKept returns the creation time of the oldest backup of groups;
// zero when there is none.
func oldestKept(groups []group) time.Time {
	var oldest time.Time
	note := func(m *backup.Manifest) {
		if m != nil && (oldest.IsZero() || m.Created.Before(oldest)) {
			oldest = m.Created
		}
	}
	for _, g := range groups {
		if g.full != nil {
			note(g.full.Manifest)
		}
		for _, s := range g.segments {
			note(s.Manifest)
		}
	}
	return oldest
}
