package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/etcdbackup/etcdbackup/storage"
)

// Catalog is what listing backups needs from a store: storage.Bucket has
// it. ListBackups calls Get from several goroutines at once, so an
// implementation must be safe for concurrent use, as buckets are.
type Catalog interface {
	List(ctx context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error]
	Get(ctx context.Context, key string) (io.ReadCloser, error)
}

// Kind classifies an object found in a cluster's folder.
type Kind string

// The kinds of entries ListBackups returns.
const (
	// KindBackup is a backup of this library: a valid manifest and its data
	// object.
	KindBackup Kind = "backup"
	// KindLegacy is an object without a manifest, directly in the
	// cluster's folder, that is not named like this library's data
	// objects: a snapshot saved by `etcdctl snapshot save` or by an older
	// backup job, raw or gzip-compressed. It restores, resting on etcd's
	// own trailer for integrity, and retention never deletes it.
	KindLegacy Kind = "legacy"
	// KindOrphan is a data object named like this library's but without a
	// manifest: a backup that never committed (a crash mid-upload, or a
	// manifest that could not be written). It is not a backup; retention
	// collects it after a grace period.
	KindOrphan Kind = "orphan"
	// KindInvalid is a manifest that cannot be read or fails validation,
	// or whose data object is missing. It is reported, never restored and
	// never deleted.
	KindInvalid Kind = "invalid"
	// KindDelta is a delta segment of a continuous backup (see Follower): a
	// valid manifest of kind "delta" and its data object. It is not a
	// snapshot: it restores only on top of a full backup of its chain.
	KindDelta Kind = "delta"
	// KindKeysJSON is a logical backup (see KeysExporter): a valid manifest
	// of kind "keys-json" and its data object. It is imported into a live
	// etcd (restore.Importer), never restored as a member's snapshot.
	KindKeysJSON Kind = "keys-json"
	// KindKeys is a logical backup stored as a keys zip (see
	// KeysZipWriter): a valid manifest of kind "keys" and its data object.
	// It is imported as keys-json is.
	KindKeys Kind = "keys"
	// KindForeign is an object in a subfolder of the cluster's folder: not
	// ours and not a legacy snapshot. It is left alone.
	KindForeign Kind = "foreign"
)

// Entry is one thing found in a cluster's folder.
type Entry struct {
	Kind    Kind
	Cluster string
	// ID is the backup's ID, or for other kinds the object's file name.
	ID string
	// Key is the data object's key in the bucket ("<cluster>/<file>"); for
	// KindInvalid it may be the manifest's key.
	Key string
	// ManifestKey is the manifest's key in the bucket; empty for legacy,
	// orphan and foreign objects.
	ManifestKey string
	// Manifest is set for KindBackup, KindDelta, KindKeysJSON and KindKeys.
	Manifest *Manifest
	// Created orders entries: the manifest's creation time, or the
	// object's modification time when there is no manifest.
	Created time.Time
	// Size is the stored size of the data object.
	Size int64
	// Compression is the manifest's, or for a legacy object a guess from
	// its name (".gz" means gzip, ".zst" zstd; else none).
	Compression Compression
	// Problem says what is wrong with a KindInvalid entry.
	Problem error
	// Unverified is, for a KindInvalid entry whose Manifest is nil, what
	// of its manifest decoded: leniently when it did not parse or
	// validate (the fields this version knows, of the types it knows,
	// unvalidated; nil when it is not a JSON object), or the valid
	// manifest of another cluster found in this one's folder. It may tell
	// whose the entry is and when it was taken; it is never restored,
	// copied or pruned from.
	Unverified *Manifest
	// Attribution says, for a legacy object found at the top of a
	// destination rather than in the cluster's folder, how it was
	// attributed to the cluster (see LegacyNames); empty otherwise.
	Attribution string
}

// Logical reports whether k is a logical backup's kind: KindKeysJSON or
// KindKeys.
func (k Kind) Logical() bool { return k == KindKeysJSON || k == KindKeys }

// Restorable reports whether the entry can be restored: a backup or a
// legacy snapshot.
func (e Entry) Restorable() bool { return e.Kind == KindBackup || e.Kind == KindLegacy }

// ListBackups lists the folder of cluster ("<cluster>/") and classifies
// what it holds, reading every manifest. It returns entries ordered by
// Created, oldest first (ties by key). An error reading one manifest makes
// its entry KindInvalid; only listing errors, and errors reading manifests
// that are not about the manifest's content (a store outage), fail the
// call.
func ListBackups(ctx context.Context, c Catalog, cluster string) ([]Entry, error) {
	if err := ValidateName("cluster", cluster); err != nil {
		return nil, err
	}
	prefix := ClusterPrefix(cluster)
	var (
		manifests []storage.ObjectInfo
		data      = map[string]storage.ObjectInfo{} // file name -> object
		entries   []Entry
	)
	for info, err := range c.List(ctx, prefix) {
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, err)
		}
		name, ok := strings.CutPrefix(info.Key, prefix)
		if !ok {
			continue
		}
		switch {
		case strings.Contains(name, "/"):
			entries = append(entries, Entry{Kind: KindForeign, Cluster: cluster, ID: name, Key: info.Key, Created: info.ModTime, Size: info.Size})
		case strings.HasSuffix(name, ManifestSuffix):
			manifests = append(manifests, info)
		default:
			data[name] = info
		}
	}

	read, err := readManifests(ctx, c, manifests)
	if err != nil {
		return nil, err
	}
	for i, info := range manifests {
		entries = append(entries, claimEntry(cluster, info, read[i], data))
	}

	for name, info := range data {
		e := Entry{Cluster: cluster, ID: name, Key: info.Key, Created: info.ModTime, Size: info.Size}
		if IsDataName(name) {
			e.Kind = KindOrphan
		} else {
			e.Kind, e.Compression = KindLegacy, legacyCompression(name)
		}
		entries = append(entries, e)
	}

	slices.SortFunc(entries, func(a, b Entry) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return entries, nil
}

// manifestReads bounds the manifests ListBackups reads at once: a folder
// of many backups on a remote store costs a round trip per manifest.
const manifestReads = 8

// manifestRead is the outcome of reading one manifest: the manifest, or
// why its content is not one.
type manifestRead struct {
	m       *Manifest
	problem error
	// unverified is, with a problem, what of the manifest decoded
	// leniently (Entry.Unverified).
	unverified *Manifest
}

// readManifests reads the manifests, manifestReads at a time. An error
// that is not about a manifest's content (a store outage) fails the call.
func readManifests(ctx context.Context, c Catalog, manifests []storage.ObjectInfo) ([]manifestRead, error) {
	out := make([]manifestRead, len(manifests))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		failOnce sync.Once
		failure  error
	)
	for range min(manifestReads, len(manifests)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(manifests) || ctx.Err() != nil {
					return
				}
				r, err := readManifest(ctx, c, manifests[i].Key)
				if err != nil {
					failOnce.Do(func() { failure = err; cancel() })
					return
				}
				out[i] = r
			}
		})
	}
	wg.Wait()
	if failure != nil {
		return nil, failure
	}
	// A cancelled caller may have stopped the workers before the end.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// readManifest reads and parses one manifest.
func readManifest(ctx context.Context, c Catalog, key string) (manifestRead, error) {
	rc, err := c.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return manifestRead{problem: fmt.Errorf("manifest vanished while listing: %w", err)}, nil
	}
	if err != nil {
		return manifestRead{}, fmt.Errorf("read manifest %s: %w", key, err)
	}
	raw, err := io.ReadAll(io.LimitReader(rc, MaxManifestSize+1))
	rc.Close()
	if err != nil {
		return manifestRead{}, fmt.Errorf("read manifest %s: %w", key, err)
	}
	m, lenient, err := parseManifest(raw)
	if err != nil {
		return manifestRead{problem: err, unverified: lenient}, nil
	}
	return manifestRead{m: m}, nil
}

// claimEntry makes the entry of one manifest read and claims its data
// object from data.
func claimEntry(cluster string, info storage.ObjectInfo, r manifestRead, data map[string]storage.ObjectInfo) Entry {
	name := path.Base(info.Key)
	invalid := func(problem error) Entry {
		return Entry{Kind: KindInvalid, Cluster: cluster, ID: name, Key: info.Key, ManifestKey: info.Key,
			Created: info.ModTime, Problem: problem}
	}
	m := r.m
	switch {
	case r.problem != nil:
		e := invalid(r.problem)
		e.Unverified = r.unverified
		return e
	case m.Cluster != cluster:
		e := invalid(fmt.Errorf("%w: manifest names cluster %q, found in the folder of %q", ErrInvalidManifest, m.Cluster, cluster))
		e.Unverified = m
		return e
	case ManifestKey(m.DataKey) != name:
		// The manifest is kept, so that retention keeps the data object
		// it names too.
		e := invalid(fmt.Errorf("%w: manifest %s names data object %q, which is not its own", ErrInvalidManifest, name, m.DataKey))
		e.Manifest = m
		return e
	}
	obj, ok := data[m.DataKey]
	if !ok {
		e := invalid(fmt.Errorf("data object %s is missing", ClusterPrefix(cluster)+m.DataKey))
		e.Manifest = m
		return e
	}
	delete(data, m.DataKey)
	if obj.Size != m.Stored.Size {
		e := invalid(fmt.Errorf("data object %s is %d bytes, its manifest says %d", obj.Key, obj.Size, m.Stored.Size))
		e.Manifest = m
		return e
	}
	e := EntryOf(m) // the manifest is checked against what was listed
	e.Key, e.ManifestKey = obj.Key, info.Key
	return e
}

// EntryOf returns the entry a listing finds for the committed backup m:
// what a catalog holds once Uploader.Commit returned, without listing it.
func EntryOf(m *Manifest) Entry {
	kind := KindBackup
	switch {
	case m.IsDelta():
		kind = KindDelta
	case m.IsKeysJSON():
		kind = KindKeysJSON
	case m.Kind == ManifestKindKeys:
		kind = KindKeys
	}
	prefix := ClusterPrefix(m.Cluster)
	return Entry{Kind: kind, Cluster: m.Cluster, ID: m.ID, Key: prefix + m.DataKey, ManifestKey: prefix + ManifestKey(m.DataKey),
		Manifest: m, Created: m.Created, Size: m.Stored.Size, Compression: m.Compression}
}

// IsDataName reports whether a file name is shaped like the data objects
// this library writes (DataKey's output):
// "<timestamp>_<id>.db[.zst|.gz][.age]", where the ID is a cluster and
// backup name (DNS labels joined by '-') with the tail BackupID and
// UniqueBackupID give it.
func IsDataName(name string) bool {
	ts, rest, ok := strings.Cut(name, "_")
	if !ok || !isTimestamp(ts) {
		return false
	}
	id, ext, ok := strings.Cut(rest, ".db")
	if !ok || !isIDShape(id) {
		return false
	}
	switch ext {
	case "", ".zst", ".gz", ".age", ".zst.age", ".gz.age":
		return true
	}
	return false
}

// isIDShape reports whether id could be a backup ID: "<cluster>-<name>"
// (lowercase letters, digits and '-') followed by a tail of isIDTail.
func isIDShape(id string) bool {
	for cut := len(id); cut > 0; cut = strings.LastIndexByte(id[:cut], '-') {
		if isIDTail(id[cut:]) && isClusterAndName(id[:cut]) {
			return true
		}
	}
	return false
}

// isClusterAndName reports whether s could be "<cluster>-<name>", two
// names of ValidateName joined by '-'.
func isClusterAndName(s string) bool {
	if len(s) > 2*MaxNameLen+1 || !strings.Contains(s, "-") || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func legacyCompression(name string) Compression {
	switch {
	case strings.HasSuffix(name, ".gz"), strings.HasSuffix(name, ".gzip"):
		return Gzip
	case strings.HasSuffix(name, ".zst"):
		return Zstd
	}
	return None
}
