package restore

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
)

// Source is a named place to look for backups, usually a destination's
// bucket confined to its prefix. Catalog is all restore needs from it: List
// and Get.
type Source struct {
	// Name identifies the source in results, events and errors, usually
	// the destination's name.
	Name string
	// Catalog reads the source; storage.Bucket has what it needs.
	Catalog backup.Catalog
	// Legacy, when set, also finds the backups of the single-bucket world
	// at the top of the source, attributed to clusters by the names the
	// host knows (see backup.LegacyNames).
	Legacy backup.LegacyNames
}

// Backup is an entry of a cluster's folder together with the source it was
// found on, which is what Fetch and Restore read it from.
type Backup struct {
	// Source is the name of the source.
	Source string
	// Catalog reads the source.
	Catalog backup.Catalog
	backup.Entry
}

// Query selects one backup of a cluster. With neither ID nor Before set, it
// selects the newest restorable backup.
type Query struct {
	// Cluster is the cluster whose folder is searched. Required.
	Cluster string
	// ID, when set, selects a backup by its backup ID, by the file name or
	// key of its data object or manifest, or a legacy object by its file
	// name or key. Backup IDs of one-shot backups may repeat over time;
	// the newest match wins.
	ID string
	// Before, when set, restricts the search to backups created strictly
	// before it: "the state of the cluster before the incident".
	Before time.Time
	// Kind, when set to a logical kind (backup.KindKeysJSON or
	// backup.KindKeys), selects logical backups of either kind (for an
	// Importer) instead of the snapshots and legacy objects a member is
	// restored from.
	Kind backup.Kind
	// TolerateUnavailable lets Find answer from the sources that could be
	// listed when others fail. By default a failing source fails Find,
	// because the newest backup may be on it.
	TolerateUnavailable bool
}

// Validate checks the query.
func (q Query) Validate() error {
	return backup.ValidateName("cluster", q.Cluster)
}

// SourceError is the failure to list one source.
type SourceError struct {
	// Source is the source's name.
	Source string
	// Err is why it could not be listed.
	Err error
}

// Error names the source and the cause.
func (e *SourceError) Error() string { return fmt.Sprintf("source %q: %v", e.Source, e.Err) }

// Unwrap returns the cause.
func (e *SourceError) Unwrap() error { return e.Err }

// List lists the folder of cluster on every source with backup.ListBackups
// and returns every entry found, restorable or not, ordered by creation
// time, oldest first; entries created at the same time keep the order of
// sources. A source that cannot be listed contributes nothing: List then
// returns what the others hold together with an error joining a
// *SourceError per failed source.
func List(ctx context.Context, sources []Source, cluster string) ([]Backup, error) {
	if err := backup.ValidateName("cluster", cluster); err != nil {
		return nil, err
	}
	all, errs := list(ctx, sources, cluster)
	return all, errors.Join(errs...)
}

// list is List with one error per failed source.
func list(ctx context.Context, sources []Source, cluster string) ([]Backup, []error) {
	var (
		all  []Backup
		errs []error
	)
	for _, src := range sources {
		if src.Catalog == nil {
			errs = append(errs, &SourceError{Source: src.Name, Err: errors.New("source has no catalog")})
			continue
		}
		entries, err := backup.ListBackups(ctx, src.Catalog, cluster)
		if err == nil && src.Legacy != nil {
			var root []backup.Entry
			root, err = backup.ListLegacyRoot(ctx, src.Catalog, cluster, src.Legacy)
			entries = append(entries, root...)
		}
		if err != nil {
			errs = append(errs, &SourceError{Source: src.Name, Err: err})
			continue
		}
		for _, e := range entries {
			all = append(all, Backup{Source: src.Name, Catalog: src.Catalog, Entry: e})
		}
	}
	slices.SortStableFunc(all, func(a, b Backup) int { return a.Created.Compare(b.Created) })
	return all, errs
}

// Find returns the backup of q.Cluster that q selects, looking on every
// source. Among restorable matches it returns the newest; a backup stored
// on several sources is returned from the first of them in sources' order.
// When nothing restorable matches, the error matches ErrNoBackup, or
// ErrNotRestorable when q.ID names an entry that exists but cannot be
// restored.
func Find(ctx context.Context, sources []Source, q Query) (Backup, error) {
	if err := q.Validate(); err != nil {
		return Backup{}, err
	}
	if len(sources) == 0 {
		return Backup{}, errors.New("find: no sources")
	}
	all, errs := list(ctx, sources, q.Cluster)
	listErr := errors.Join(errs...)
	if listErr != nil && (!q.TolerateUnavailable || len(errs) == len(sources)) {
		return Backup{}, fmt.Errorf("find backups of %q: %w", q.Cluster, listErr)
	}

	var (
		best     Backup
		found    bool
		unusable []Backup
	)
	for _, b := range all {
		if !q.Before.IsZero() && !b.Created.Before(q.Before) {
			continue
		}
		if q.ID != "" && !b.matches(q.ID) {
			continue
		}
		if !q.usable(b) {
			unusable = append(unusable, b)
			continue
		}
		// all is ordered by Created, then by source: the same instant on
		// a later source does not win.
		if !found || b.Created.After(best.Created) {
			best, found = b, true
		}
	}
	if found {
		return best, nil
	}
	if q.ID != "" && len(unusable) > 0 {
		u := unusable[len(unusable)-1]
		why := fmt.Sprintf("it is %s", u.Kind)
		if u.Problem != nil {
			why += ": " + u.Problem.Error()
		}
		return Backup{}, fmt.Errorf("%w: %s on source %q: %s", ErrNotRestorable, u.Key, u.Source, why)
	}
	err := fmt.Errorf("%w: %s", ErrNoBackup, q.describe(sources))
	if listErr != nil {
		err = fmt.Errorf("%w (and %w)", err, listErr)
	}
	return Backup{}, err
}

// usable reports whether b is of the kind q looks for.
func (q Query) usable(b Backup) bool {
	if q.Kind == "" {
		return b.Restorable()
	}
	if q.Kind.Logical() {
		return b.Kind.Logical()
	}
	return b.Kind == q.Kind
}

// matches reports whether id names b: its backup ID, or the file name or
// key of its data object or manifest.
func (b Backup) matches(id string) bool {
	if b.ID == id || b.Key == id || path.Base(b.Key) == id {
		return true
	}
	if b.Manifest != nil && b.Manifest.ID == id {
		return true // an invalid entry whose manifest could be read
	}
	return b.ManifestKey != "" && (b.ManifestKey == id || path.Base(b.ManifestKey) == id)
}

func (q Query) describe(sources []Source) string {
	var s strings.Builder
	fmt.Fprintf(&s, "no restorable backup of cluster %q", q.Cluster)
	if q.ID != "" {
		fmt.Fprintf(&s, " named %q", q.ID)
	}
	if !q.Before.IsZero() {
		fmt.Fprintf(&s, " created before %s", q.Before.UTC().Format(time.RFC3339))
	}
	names := make([]string, len(sources))
	for i, src := range sources {
		names[i] = fmt.Sprintf("%q", src.Name)
	}
	fmt.Fprintf(&s, " on %s", strings.Join(names, ", "))
	return s.String()
}
