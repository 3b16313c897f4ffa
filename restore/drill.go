package restore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage"
)

// SnapshotStatus is what `etcdutl snapshot status` reports of a snapshot
// file or a member's database.
type SnapshotStatus struct {
	// Hash is etcd's crc32 (Castagnoli) over every bucket, key and value of
	// the database, comparable with etcdutl's output for the same file.
	Hash uint32
	// Revision is the store's latest revision.
	Revision int64
	// TotalKeys is the number of live keys.
	TotalKeys int
	// TotalSize is the database's size in bytes.
	TotalSize int64
	// Version is the storage version of the data, empty for data written
	// by etcd older than 3.6.
	Version string
}

// Status reads the status of a snapshot file, or of a member's database
// ("<data-dir>/member/snap/db"), with etcd's own code. It checks the
// database's structure and reads every key, so it takes time in proportion
// to the database's size.
func Status(path string) (SnapshotStatus, error) {
	st, err := snapshot.NewV3(zap.NewNop()).Status(path)
	if err != nil {
		return SnapshotStatus{}, fmt.Errorf("snapshot status of %s: %w", path, err)
	}
	return SnapshotStatus{Hash: st.Hash, Revision: st.Revision, TotalKeys: st.TotalKey, TotalSize: st.TotalSize, Version: st.Version}, nil
}

// DrillResult records one restore drill: what was tested and what it
// showed. It holds no key material and can be stored as is.
type DrillResult struct {
	// Source, Cluster, ID, Key and Kind are those of the backup drilled.
	Source, Cluster, ID, Key string
	Kind                     backup.Kind
	// Created is when the backup was made.
	Created time.Time
	// Started is when the drill started, Duration how long it took.
	Started  time.Time
	Duration time.Duration
	// Stored and Raw are the verified digests of the object and of the
	// snapshot; ManifestChecked says whether they were compared with a
	// manifest (false for legacy objects).
	Stored, Raw     backup.Digest
	ManifestChecked bool
	// Status is the snapshot's status, read before the restore.
	Status SnapshotStatus
	// Restored reports that etcd restored a data directory from the
	// snapshot and that its database holds the same revision and keys.
	Restored bool
	// Err is why the drill failed; nil when it passed.
	Err error
}

// Passed reports whether the drill proved the backup restorable.
func (d *DrillResult) Passed() bool { return d.Err == nil && d.Restored }

// drillPeerURL is the peer URL of the throwaway member a drill restores:
// the data directory is never started, so nothing listens on it.
const drillPeerURL = "http://127.0.0.1:2380"

// Drill proves that b can be restored, without touching any live cluster:
// it fetches and verifies b (as Fetch does), reads the snapshot's status,
// restores a single-member data directory from it with etcd's own restore
// and checks that the restored database holds the same revision and number
// of keys. Everything happens in a temporary directory under r.TempDir,
// removed at the end.
//
// The result is never nil; on failure its Err is the error returned.
func (r *Restorer) Drill(ctx context.Context, b Backup) (*DrillResult, error) {
	res := &DrillResult{Source: b.Source, Cluster: b.Cluster, ID: b.ID, Key: b.Key, Kind: b.Kind, Created: b.Created, Started: r.now()}
	if err := r.Validate(); err != nil {
		res.Err = err
		return res, err
	}
	unpin, err := r.pin(ctx, b)
	if err != nil {
		res.Err = err
		return res, err
	}
	defer unpin()
	o := r.start(b, "drill")
	err = r.drill(ctx, o, b, res)
	res.Duration = r.now().Sub(res.Started)
	if err != nil {
		res.Err = o.fail(err)
		return res, res.Err
	}
	o.log.Info("drill passed", "revision", res.Status.Revision, "keys", res.Status.TotalKeys,
		"hash", res.Status.Hash, "raw_bytes", res.Raw.Size, "elapsed", res.Duration)
	return res, nil
}

func (r *Restorer) drill(ctx context.Context, o *operation, b Backup, res *DrillResult) error {
	if !b.Restorable() {
		return fmt.Errorf("%w: %s is %s, not a snapshot", ErrNotRestorable, b.Key, b.Kind)
	}
	work, err := os.MkdirTemp(r.TempDir, "etcdbackup-drill-")
	if err != nil {
		return fmt.Errorf("create drill directory: %w", err)
	}
	defer os.RemoveAll(work)

	snap := filepath.Join(work, "snapshot.db")
	f, err := os.OpenFile(snap, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create drill file: %w", err)
	}
	fetched, err := r.stream(ctx, o, b, f)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close drill file: %w", cerr)
	}
	if err != nil {
		return err
	}
	res.Stored, res.Raw, res.ManifestChecked = fetched.Stored, fetched.Raw, fetched.ManifestChecked
	o.event(Event{Kind: Fetched, Path: snap, StoredBytes: fetched.Stored.Size, RawBytes: fetched.Raw.Size})

	if res.Status, err = Status(snap); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m := Member{Name: "drill", DataDir: filepath.Join(work, "data"), PeerURLs: []string{drillPeerURL}}
	restored, err := r.restoreMembers(ctx, o, snap, true, []Member{m})
	if err != nil {
		return err
	}
	after, err := Status(filepath.Join(restored[0].DataDir, "member", "snap", "db"))
	if err != nil {
		return fmt.Errorf("restored database: %w", err)
	}
	if after.Revision != res.Status.Revision || after.TotalKeys != res.Status.TotalKeys {
		return fmt.Errorf("restored database holds revision %d and %d keys, the snapshot revision %d and %d keys",
			after.Revision, after.TotalKeys, res.Status.Revision, res.Status.TotalKeys)
	}
	res.Restored = true
	return nil
}

// DrillJob returns a function that runs a drill of the backup q selects on
// sources (by default the newest) and hands the result, passed or failed,
// to record, which may be nil. A host schedules it like any periodic job;
// the function's error is the drill's, or Find's when there was nothing to
// drill. With r.Pins set, the backup is pinned from the start of the drill;
// when a prune deleted it between Find and that moment, the job finds again
// and drills the backup q selects now.
func (r *Restorer) DrillJob(sources []Source, q Query, record func(context.Context, *DrillResult)) func(context.Context) error {
	return func(ctx context.Context) error {
		started := r.now()
		b, err := Find(ctx, sources, q)
		var res *DrillResult
		if err != nil {
			res = &DrillResult{Cluster: q.Cluster, Started: started, Duration: r.now().Sub(started), Err: err}
			if len(sources) == 1 {
				res.Source = sources[0].Name
			}
		} else {
			res, err = r.Drill(ctx, b)
			// A prune may delete the backup between Find and the drill's
			// pin; the newest backup is then another one: drill that.
			if errors.Is(err, storage.ErrNotFound) && ctx.Err() == nil {
				if next, ferr := Find(ctx, sources, q); ferr == nil && (next.Source != b.Source || next.Key != b.Key) {
					r.logger().Info("drilled backup deleted meanwhile, drilling the one found now",
						"cluster", b.Cluster, "deleted", b.ID, "backup", next.ID, "destination", next.Source)
					res, err = r.Drill(ctx, next)
				}
			}
		}
		if record != nil {
			record(ctx, res)
		}
		return err
	}
}
