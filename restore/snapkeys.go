package restore

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"

	"github.com/etcdbackup/etcdbackup/backup"
)

// SnapshotKeys turns a snapshot backup into a keys-json object offline, no
// etcd needed: it fetches and verifies the snapshot into a temporary
// directory, opens its database with etcd's own storage packages (the
// mvcc store, read at the snapshot's revision) and writes the keys under
// prefixes (none: every key) to w. Opening the store builds etcd's index of
// every key in memory, as etcd does at start.
func (r *Restorer) SnapshotKeys(ctx context.Context, b Backup, prefixes []string, w io.Writer) (*backup.KeysJSONHeader, int64, error) {
	return r.snapshotKeys(ctx, b, prefixes, backup.ManifestKindKeysJSON, w)
}

// snapshotKeys is SnapshotKeys writing the object of a logical backup of
// manifest kind kind: keys-json or a keys zip.
func (r *Restorer) snapshotKeys(ctx context.Context, b Backup, prefixes []string, kind string, w io.Writer) (*backup.KeysJSONHeader, int64, error) {
	if !b.Restorable() {
		return nil, 0, fmt.Errorf("%w: %s is %s, not a snapshot", ErrNotRestorable, b.Key, b.Kind)
	}
	dir, err := os.MkdirTemp(r.TempDir, "etcdbackup-keys-")
	if err != nil {
		return nil, 0, fmt.Errorf("create directory: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "snapshot.db")
	if _, err := r.Fetch(ctx, b, path); err != nil {
		return nil, 0, err
	}
	if err := checkDatabase(ctx, path); err != nil {
		return nil, 0, err
	}
	kv, closeStore, err := openStore(path)
	if err != nil {
		return nil, 0, err
	}
	defer closeStore()
	created := r.now().UTC()
	if b.Manifest != nil {
		created = b.Manifest.Created
	}
	h := backup.KeysJSONHeader{Format: backup.KeysJSONFormat, Version: backup.KeysJSONVersion, Revision: kv.Rev(),
		Prefixes: backup.NormalizePrefixes(prefixes), Created: created}
	if h.Prefixes == nil {
		h.Prefixes = []string{}
	}
	if b.Manifest != nil {
		h.ClusterID = b.Manifest.Etcd.ClusterID
	}
	kw, err := backup.NewKeyWriter(w, kind, h)
	if err != nil {
		return nil, 0, err
	}
	if z, ok := kw.(*backup.KeysZipWriter); ok {
		defer z.Discard() // its temporary files, whether or not it was closed
	}
	if err := writeStoreKeys(ctx, kv, h, kw); err != nil {
		return nil, kw.Keys(), err
	}
	return &h, kw.Keys(), kw.Close()
}

// openStore opens the mvcc store of the database at path, which
// checkDatabase accepted. etcd's storage panics (zap's Panic) on what it
// cannot read: that becomes an error matching ErrIntegrity. After such a
// panic nothing of the store is closed: a panic inside a transaction
// leaves the backend's lock held and its Close would wait forever. What
// leaks is the file's mapping and a few goroutines; the caller removes the
// (temporary) file.
func openStore(path string) (_ mvcc.KV, closeStore func(), err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var closers []func()
	closeStore = func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}
	defer func() {
		if p := recover(); p != nil {
			closeStore = nil
			err = fmt.Errorf("%w: open database %s: %v", ErrIntegrity, path, p)
		}
	}()
	cfg := backend.DefaultBackendConfig(zap.NewNop())
	cfg.Path, cfg.UnsafeNoFsync = path, true
	be := backend.New(cfg)
	closers = append(closers, func() { be.Close() })
	le := lease.NewLessor(zap.NewNop(), be, nil, lease.LessorConfig{MinLeaseTTL: 1})
	closers = append(closers, le.Stop)
	kv := mvcc.NewStore(zap.NewNop(), be, le, mvcc.StoreConfig{})
	closers = append(closers, func() { kv.Close() })
	return kv, closeStore, nil
}

// writeStoreKeys writes the keys of kv under h's prefixes at h's revision,
// a page at a time.
func writeStoreKeys(ctx context.Context, kv mvcc.KV, h backup.KeysJSONHeader, kw backup.KeyWriter) error {
	// Every key: an empty range end that is not nil, as etcd's server
	// turns a client's "\x00" into (a "\x00" end would end before the
	// first key, and a nil one read a single key).
	ranges := [][2]string{{"\x00", ""}}
	if len(h.Prefixes) > 0 {
		ranges = nil
		for _, p := range h.Prefixes {
			ranges = append(ranges, [2]string{p, clientv3.GetPrefixRangeEnd(p)})
		}
	}
	for _, rg := range ranges {
		key := rg[0]
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			res, err := kv.Range(ctx, []byte(key), append([]byte{}, rg[1]...), mvcc.RangeOptions{Limit: 1000, Rev: h.Revision})
			if err != nil {
				return fmt.Errorf("read snapshot keys: %w", err)
			}
			for _, k := range res.KVs {
				if err := kw.Write(backup.KeyValue{Key: k.Key, Value: k.Value, CreateRevision: k.CreateRevision,
					ModRevision: k.ModRevision, Version: k.Version, Lease: k.Lease}); err != nil {
					return err
				}
			}
			if len(res.KVs) < 1000 {
				break
			}
			key = string(res.KVs[len(res.KVs)-1].Key) + "\x00"
		}
	}
	return nil
}

// SnapshotExporter is a backup.Snapshotter that serves a snapshot backup
// as a keys-json object or a keys zip (see Restorer.SnapshotKeys): with
// Request.Kind set to the same Kind, the pipeline stores every old
// snapshot's keys as a logical backup.
type SnapshotExporter struct {
	Restorer *Restorer
	Backup   Backup
	Prefixes []string
	// Kind is backup.ManifestKindKeysJSON (the zero value) or
	// backup.ManifestKindKeys.
	Kind string
}

var _ backup.Snapshotter = (*SnapshotExporter)(nil)

// Snapshot implements backup.Snapshotter. The object is written to a
// temporary file first, since its revision is only known once the
// snapshot is open.
func (e *SnapshotExporter) Snapshot(ctx context.Context) (*backup.Snapshot, error) {
	f, err := os.CreateTemp(e.Restorer.TempDir, "etcdbackup-export-*")
	if err != nil {
		return nil, fmt.Errorf("create export file: %w", err)
	}
	os.Remove(f.Name()) // removed once closed
	h, n, err := e.Restorer.snapshotKeys(ctx, e.Backup, e.Prefixes, e.Kind, f)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	info := backup.SnapshotInfo{RevisionLow: h.Revision, RevisionHigh: h.Revision, Started: time.Now()}
	if m := e.Backup.Manifest; m != nil {
		info.ClusterID, _ = strconv.ParseUint(m.Etcd.ClusterID, 16, 64)
		info.EtcdVersion = m.Etcd.Version
	}
	return backup.NewLogicalSnapshot(f, info, func(i backup.SnapshotInfo) (backup.SnapshotInfo, error) {
		i.Keys = n
		return i, nil
	}), nil
}
