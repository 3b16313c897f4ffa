package backuptest

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"go.etcd.io/etcd/pkg/v3/traceutil"
	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"
)

// KeysSnapshot returns a valid etcd snapshot stream holding keys: the
// bbolt database etcd's own storage packages write, followed by its sha256
// trailer, as an etcd member's Maintenance.Snapshot sends it. It restores
// with etcdutl and reads with restore.Restorer.SnapshotKeys. No etcd runs:
// the database is written in a temporary directory, removed before
// KeysSnapshot returns.
//
// Each key is put in its own revision, in key order, so the snapshot's
// revision, returned as rev, is len(keys)+1 (etcd starts at 1).
func KeysSnapshot(keys map[string]string) (stream []byte, rev int64, err error) {
	dir, err := os.MkdirTemp("", "backuptest-snapshot-*")
	if err != nil {
		return nil, 0, fmt.Errorf("create snapshot directory: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "db")

	lg := zap.NewNop()
	cfg := backend.DefaultBackendConfig(lg)
	cfg.Path, cfg.UnsafeNoFsync, cfg.BatchInterval = path, true, time.Hour
	be := backend.New(cfg)
	le := lease.NewLessor(lg, be, nil, lease.LessorConfig{MinLeaseTTL: 1})
	kv := mvcc.NewStore(lg, be, le, mvcc.StoreConfig{})
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if k == "" {
			kv.Close()
			le.Stop()
			be.Close()
			return nil, 0, fmt.Errorf("an etcd key cannot be empty")
		}
		txn := kv.Write(traceutil.TODO())
		txn.Put([]byte(k), []byte(keys[k]), lease.NoLease)
		txn.End()
	}
	rev = kv.Rev()
	be.ForceCommit()
	kv.Close()
	le.Stop()
	if err := be.Close(); err != nil {
		return nil, 0, fmt.Errorf("close snapshot database: %w", err)
	}
	db, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, fmt.Errorf("read snapshot database: %w", err)
	}
	sum := sha256.Sum256(db)
	return append(db, sum[:]...), rev, nil
}
