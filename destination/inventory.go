package destination

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage"
)

// Entry is one object an inventory sync found on a destination: a backup,
// a legacy snapshot, an orphan, an invalid manifest or a foreign object
// (see backup.Kind). Its Manifest, when set, is shared and must not be
// modified.
type Entry struct {
	// Destination is the name of the destination the object is on.
	Destination string
	backup.Entry
}

// id identifies an entry across syncs.
func (e Entry) id() string {
	return string(e.Kind) + "\x00" + e.Key + "\x00" + e.ManifestKey
}

// Inventory is what a destination held at its last sync: seed 004's view
// of the backups on a remote target.
type Inventory struct {
	// Destination is the destination's name.
	Destination string
	// Synced is when the last successful sync ended; zero before the
	// first.
	Synced time.Time
	// Err is the failure of the last sync, nil when it succeeded. Entries
	// then still hold what the last successful sync found.
	Err error
	// Entries are the objects found in the destination's cluster folders,
	// ordered by cluster, then creation time, then key.
	Entries []Entry
	// Added and Removed are the entries the last successful sync found
	// new or gone, compared to the sync before it. The first sync finds
	// every entry new.
	Added, Removed []Entry
}

// Cluster returns the entries of one cluster.
func (inv Inventory) Cluster(cluster string) []Entry {
	var out []Entry
	for _, e := range inv.Entries {
		if e.Cluster == cluster {
			out = append(out, e)
		}
	}
	return out
}

// Clusters returns the names of the clusters with entries, sorted.
func (inv Inventory) Clusters() []string {
	var out []string
	for _, e := range inv.Entries {
		if len(out) == 0 || out[len(out)-1] != e.Cluster {
			out = append(out, e.Cluster)
		}
	}
	return out
}

// inventoryState is a destination's inventory and the manifests it read.
type inventoryState struct {
	mu             sync.Mutex
	epoch          uint64 // counts resets; a sync of an older epoch is dropped
	synced         time.Time
	err            error
	entries        []Entry
	added, removed []Entry
	manifests      map[string]cachedManifest

	// Changes made through the destination while syncs list: a sync's
	// listing may have been taken before them, so store applies the ones
	// after the sync began to what it listed.
	seq     uint64         // numbers the changes
	changes []change       // since the oldest sync in flight began
	syncing map[uint64]int // syncs in flight, by the seq they began at
}

// change is a commit (entry set) or a delete (key set) made through the
// destination.
type change struct {
	seq   uint64
	entry *Entry
	key   string
}

// cachedManifest is a manifest's bytes with the listing data of the object
// they were read from, so an unchanged manifest is not read again.
type cachedManifest struct {
	info storage.ObjectInfo
	data []byte
}

func (s *inventoryState) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epoch++
	s.synced, s.err, s.entries, s.added, s.removed, s.manifests = time.Time{}, nil, nil, nil, nil, nil
	s.changes = nil
}

// begin starts a sync: end must follow.
func (s *inventoryState) begin() (epoch, mark uint64, cache map[string]cachedManifest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.syncing == nil {
		s.syncing = map[uint64]int{}
	}
	s.syncing[s.seq]++
	return s.epoch, s.seq, s.manifests
}

// end ends the sync begun at mark and forgets the changes no sync in
// flight needs.
func (s *inventoryState) end(mark uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.syncing[mark]--; s.syncing[mark] <= 0 {
		delete(s.syncing, mark)
	}
	oldest := s.seq
	for m := range s.syncing {
		oldest = min(oldest, m)
	}
	s.changes = slices.DeleteFunc(s.changes, func(c change) bool { return c.seq <= oldest })
}

// record notes a change for the syncs in flight; s.mu is held.
func (s *inventoryState) record(c change) {
	s.seq++
	if len(s.syncing) == 0 {
		return
	}
	c.seq = s.seq
	s.changes = append(s.changes, c)
}

// byPlace orders entries as an inventory lists them.
func byPlace(a, b Entry) int {
	return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), a.Created.Compare(b.Created), cmp.Compare(a.Key, b.Key))
}

// insertEntry puts e in its place in entries, in place of the entries of
// the same objects (an orphan listed before its manifest was written).
func insertEntry(entries []Entry, e Entry) []Entry {
	entries = slices.DeleteFunc(entries, func(o Entry) bool { return o.Key == e.Key || e.ManifestKey != "" && o.ManifestKey == e.ManifestKey })
	i, _ := slices.BinarySearchFunc(entries, e, byPlace)
	return slices.Insert(entries, i, e)
}

// removeKey drops the entries whose data object or manifest is key.
func removeKey(entries []Entry, key string) (kept, gone []Entry) {
	kept = slices.DeleteFunc(entries, func(e Entry) bool {
		if e.Key == key || e.ManifestKey == key {
			gone = append(gone, e)
			return true
		}
		return false
	})
	return kept, gone
}

func (s *inventoryState) get(name string) Inventory {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Inventory{
		Destination: name,
		Synced:      s.synced,
		Err:         s.err,
		Entries:     slices.Clone(s.entries),
		Added:       slices.Clone(s.added),
		Removed:     slices.Clone(s.removed),
	}
}

// committed adds the entry of a backup this process just committed, so
// that the inventory shows it at once rather than at the next sync. Before
// the first sync it does nothing: that sync finds it.
func (s *inventoryState) committed(e Entry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record(change{entry: &e})
	if s.synced.IsZero() || slices.ContainsFunc(s.entries, func(o Entry) bool { return o.id() == e.id() }) {
		return false
	}
	s.entries = insertEntry(s.entries, e)
	return true
}

// deleted drops the entries whose data object or manifest is key, as a
// delete through the destination removed it.
func (s *inventoryState) deleted(key string) []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record(change{key: key})
	var gone []Entry
	s.entries, gone = removeKey(s.entries, key)
	return gone
}

// failing reports whether the last sync failed.
func (s *inventoryState) failing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil
}

// fail records a failed sync of epoch and reports whether the sync before
// it had succeeded.
func (s *inventoryState) fail(epoch uint64, err error) (first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch != epoch {
		return false
	}
	first = s.err == nil
	s.err = err
	return first
}

// store records a successful sync of epoch and returns what changed; ok is
// false when the inventory was reset meanwhile.
// The commits and deletes made through the destination since the sync
// began (mark) are applied to what it listed, which may predate them.
func (s *inventoryState) store(epoch, mark uint64, now time.Time, entries []Entry, cache map[string]cachedManifest) (added, removed []Entry, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch != epoch {
		return nil, nil, false
	}
	for _, c := range s.changes {
		switch {
		case c.seq <= mark:
		case c.entry != nil:
			entries = insertEntry(entries, *c.entry)
		default:
			entries, _ = removeKey(entries, c.key)
		}
	}
	before := make(map[string]bool, len(s.entries))
	for _, e := range s.entries {
		before[e.id()] = true
	}
	after := make(map[string]bool, len(entries))
	for _, e := range entries {
		after[e.id()] = true
		if !before[e.id()] {
			added = append(added, e)
		}
	}
	for _, e := range s.entries {
		if !after[e.id()] {
			removed = append(removed, e)
		}
	}
	s.synced, s.err, s.entries, s.added, s.removed, s.manifests = now, nil, entries, added, removed, cache
	return slices.Clone(added), slices.Clone(removed), true
}

// Inventory returns what the destination held at its last sync.
func (d *Destination) Inventory() Inventory { return d.inv.get(d.name) }

// sync lists the destination's cluster folders into its inventory.
func (r *Registry) sync(ctx context.Context, d *Destination) (Inventory, error) {
	epoch, mark, cache := d.inv.begin()
	defer d.inv.end(mark)
	_, _, _, h, removed := d.snapshot()
	var err error
	if removed {
		return Inventory{}, fmt.Errorf("%w: %s was removed", ErrNotFound, quote(d.name))
	}
	if h == nil {
		d.mu.RLock()
		cause := d.openErr
		d.mu.RUnlock()
		if cause == nil {
			cause = errors.New("store opened meanwhile; sync again")
		}
		err = fmt.Errorf("destination %s: %w: %w", quote(d.name), ErrUnavailable, cause)
		d.inv.fail(epoch, err)
		return d.Inventory(), err
	}
	defer h.release()

	var (
		entries   []Entry
		manifests map[string]cachedManifest
	)
	if h.precheck != nil {
		err = h.precheck()
	}
	if err == nil {
		var legacy backup.LegacyNames
		if r.opts.LegacyNames != nil {
			legacy = r.opts.LegacyNames()
		}
		entries, manifests, err = listInventory(ctx, d.name, h.bucket, cache, legacy)
	}
	if err != nil {
		if ctx.Err() == nil {
			// Warn once per outage; availability checks report the rest.
			level := slog.LevelDebug
			if d.inv.fail(epoch, err) {
				level = slog.LevelWarn
			}
			d.log.Log(ctx, level, "inventory sync failed", "error", err)
		}
		return d.Inventory(), err
	}
	hadErr := d.inv.failing()
	added, removedEntries, ok := d.inv.store(epoch, mark, r.now(), entries, manifests)
	if ok && hadErr {
		d.log.Info("inventory sync recovered")
	}
	if ok && (len(added) > 0 || len(removedEntries) > 0) {
		d.log.Debug("inventory changed", "added", len(added), "removed", len(removedEntries), "entries", len(entries))
		r.observe(Event{Kind: InventoryChanged, Destination: d.name, Time: r.now(), Added: added, Removed: removedEntries})
	}
	return d.Inventory(), nil
}

// listInventory lists b once, groups the keys by cluster folder (the first
// path segment, when it is a valid cluster name) and classifies each
// folder with backup.ListBackups. Manifests unchanged since cache was
// filled are not read again.
func listInventory(ctx context.Context, name string, b storage.Bucket, cache map[string]cachedManifest, legacy backup.LegacyNames) ([]Entry, map[string]cachedManifest, error) {
	byCluster := map[string][]storage.ObjectInfo{}
	var clusters []string
	var root []Entry
	for info, err := range b.List(ctx, "") {
		if err != nil {
			return nil, nil, err
		}
		cluster, _, ok := strings.Cut(info.Key, "/")
		if !ok {
			if e, ok := legacyRootEntry(info, legacy); ok {
				root = append(root, Entry{Destination: name, Entry: e})
			}
			continue
		}
		if backup.ValidateName("cluster", cluster) != nil {
			continue // not in a cluster folder: not ours to classify
		}
		if _, seen := byCluster[cluster]; !seen {
			clusters = append(clusters, cluster)
		}
		byCluster[cluster] = append(byCluster[cluster], info)
	}
	slices.Sort(clusters)

	fresh := map[string]cachedManifest{}
	var entries []Entry
	for _, cluster := range clusters {
		cat := &listedCatalog{objects: byCluster[cluster], bucket: b, old: cache, fresh: fresh}
		found, err := backup.ListBackups(ctx, cat, cluster)
		if err != nil {
			return nil, nil, err
		}
		for _, e := range found {
			entries = append(entries, Entry{Destination: name, Entry: e})
		}
	}
	if len(root) > 0 {
		entries = append(entries, root...)
		slices.SortStableFunc(entries, func(a, b Entry) int { return strings.Compare(a.Cluster, b.Cluster) })
	}
	return entries, fresh, nil
}

// legacyRootEntry attributes an object at the top of the destination to
// a cluster, as a legacy backup of the single-bucket world (see
// Options.LegacyNames).
func legacyRootEntry(info storage.ObjectInfo, names backup.LegacyNames) (backup.Entry, bool) {
	if names == nil || strings.HasSuffix(info.Key, backup.ManifestSuffix) {
		return backup.Entry{}, false
	}
	cluster, how, ok := names.Attribute(info.Key)
	if !ok {
		return backup.Entry{}, false
	}
	return backup.Entry{Kind: backup.KindLegacy, Cluster: cluster, ID: info.Key, Key: info.Key, Created: info.ModTime,
		Size: info.Size, Attribution: how}, true
}

// listedCatalog serves ListBackups from a listing already made, and reads
// manifests through a cache. ListBackups calls Get from several goroutines.
type listedCatalog struct {
	objects []storage.ObjectInfo // one cluster folder, in key order
	bucket  storage.Bucket
	old     map[string]cachedManifest // read only

	mu    sync.Mutex                    // guards fresh and index
	fresh map[string]cachedManifest     // filled for the next sync
	index map[string]storage.ObjectInfo // objects by key, made on first use
}

func (c *listedCatalog) List(_ context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error] {
	return func(yield func(storage.ObjectInfo, error) bool) {
		for _, info := range c.objects {
			if strings.HasPrefix(info.Key, prefix) && !yield(info, nil) {
				return
			}
		}
	}
}

func (c *listedCatalog) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	c.mu.Lock()
	if c.index == nil {
		c.index = make(map[string]storage.ObjectInfo, len(c.objects))
		for _, info := range c.objects {
			c.index[info.Key] = info
		}
	}
	info, listed := c.index[key]
	if cached, ok := c.old[key]; ok && listed && sameObject(cached.info, info) {
		c.fresh[key] = cached
		c.mu.Unlock()
		return io.NopCloser(bytes.NewReader(cached.data)), nil
	}
	c.mu.Unlock()
	rc, err := c.bucket.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	// One byte more than a manifest may have, so that ParseManifest still
	// sees an oversized one as such.
	data, err := io.ReadAll(io.LimitReader(rc, backup.MaxManifestSize+1))
	if err != nil {
		return nil, err
	}
	if listed && len(data) <= backup.MaxManifestSize {
		c.mu.Lock()
		c.fresh[key] = cachedManifest{info: info, data: data}
		c.mu.Unlock()
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// sameObject reports whether two listings describe the same object
// version.
func sameObject(a, b storage.ObjectInfo) bool {
	return a.Key == b.Key && a.Size == b.Size && a.ETag == b.ETag && a.ModTime.Equal(b.ModTime) &&
		(a.ETag != "" || !a.ModTime.IsZero())
}
