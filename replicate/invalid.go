package replicate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage"
)

// unreadable returns the entries of the source listed backup.KindInvalid
// that sel selects by All or Since: manifests this version cannot read,
// or whose data object was missing or of another size (ErrInvalidSource).
// Each is dated (Created) by its manifest's creation time when that can
// be read, else by when the store wrote it. An entry is left out when
//   - its manifest vanished while the source was listed (a prune deleted
//     it): the source no longer holds it;
//   - its data object is there now, of the manifest's size: a backup
//     committed while the listing ran (a store that lists in no order, a
//     file destination, can list the manifest and not the data object);
//   - sel.Name is set and the manifest, read leniently, names another
//     backup name or config;
//   - sel.Retention or sel.PointInTime is set and it is dated before
//     oldest, the oldest backup the selection copies: the plan drops
//     backups that old. When the selection copies nothing (oldest is
//     zero), it is kept.
func (r *copyRun) unreadable(entries []backup.Entry, sel Selection, oldest time.Time) []backup.Entry {
	var out []backup.Entry
	for _, e := range entries {
		if e.Kind != backup.KindInvalid || e.ManifestKey == "" || errors.Is(e.Problem, storage.ErrNotFound) {
			continue
		}
		m := e.Manifest
		if m != nil {
			if r.committedMeanwhile(m) {
				continue
			}
		} else {
			m = r.sketch(e.ManifestKey)
		}
		if m != nil && !m.Created.IsZero() {
			e.Created = m.Created
		}
		switch {
		case sel.Name != "" && m != nil && (m.Name != "" || m.Config != "") && m.Name != sel.Name && m.Config != sel.Name:
		case (sel.Retention != nil || sel.PointInTime != nil) && !oldest.IsZero() && e.Created.Before(oldest):
		case sel.All || !sel.Since.IsZero() && !e.Created.Before(sel.Since):
			out = append(out, e)
		}
	}
	return out
}

// sketch reads the manifest at key leniently: the fields this version
// knows, whatever else it holds or lacks, without validating them. Nil
// when it cannot be read or decoded.
func (r *copyRun) sketch(key string) *backup.Manifest {
	m, err := r.readManifest(r.c.Source, key, func(rd io.Reader) (*backup.Manifest, error) {
		raw, err := io.ReadAll(io.LimitReader(rd, backup.MaxManifestSize+1))
		if err != nil {
			return nil, err
		}
		if len(raw) > backup.MaxManifestSize {
			return nil, fmt.Errorf("larger than %d bytes", backup.MaxManifestSize)
		}
		var m backup.Manifest
		if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&m); err != nil {
			return nil, err
		}
		return &m, nil
	})
	if err != nil {
		return nil
	}
	return m
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
