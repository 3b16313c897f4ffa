package restore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.etcd.io/etcd/pkg/v3/traceutil"
	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/datadir"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.uber.org/zap"

	"github.com/etcdbackup/etcdbackup/backup"
)

// DefaultReplayLeaseTTL is the TTL given to a lease that keys of a segment
// are attached to when neither the restored database nor any segment
// knows it: the follower could not learn its TTL because it had already
// expired.
const DefaultReplayLeaseTTL = 60

// ErrReplay matches errors of applying segments: a revision that does not
// follow the database's, or a store whose revision diverges from the
// source's.
var ErrReplay = errors.New("replay")

// replayer applies the revisions of delta segments to a member's data
// directory offline, through etcd's own storage packages: the backend
// (bbolt), the mvcc key-value store and the lessor. Each source revision
// becomes one write transaction, so the store's revisions, and every key's
// create and mod revision and version, come out as etcd computed them.
type replayer struct {
	be   backend.Backend
	path string
	le   lease.Lessor
	kv   mvcc.KV
	lg   *zap.Logger
	ttl  map[int64]int64 // lease TTLs the segments recorded

	// start is the database's revision before replay; rev the current.
	start, rev int64
	// target stops replay after that revision (zero: no bound); until
	// stops it before the first revision received after that time.
	target int64
	until  time.Time

	revisions, events int64
}

// replayBatch is the number of writes of one backend commit during replay.
const replayBatch = 1000

// errReplayDone stops decoding once the target is reached.
var errReplayDone = errors.New("target reached")

// openReplay opens the database of the data directory dir. etcd's storage
// packages panic (through zap) on a database they cannot open or recover;
// that is returned as an error.
func openReplay(dir string, lg *zap.Logger) (_ *replayer, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: open the restored database: %v", ErrReplay, p)
		}
	}()
	cfg := backend.DefaultBackendConfig(lg)
	cfg.Path = datadir.ToBackendFileName(dir)
	// Commit every replayBatch writes, not by time: what a batch holds
	// stays in memory until it commits, so memory stays flat in the
	// length of the replay. The database is not live, and ForceCommit at
	// the end makes it durable.
	cfg.BatchInterval = time.Hour
	cfg.BatchLimit = replayBatch
	cfg.UnsafeNoFsync = true
	cfg.Timeout = 10 * time.Second
	be := backend.New(cfg)
	le := lease.NewLessor(lg, be, nil, lease.LessorConfig{MinLeaseTTL: 1})
	// Compaction (settle) runs in large batches without pauses: nothing
	// else uses the store.
	kv := mvcc.NewStore(lg, be, le, mvcc.StoreConfig{CompactionBatchLimit: 10 * replayBatch, CompactionSleepInterval: time.Nanosecond})
	rev := kv.Rev()
	return &replayer{be: be, path: cfg.Path, le: le, kv: kv, lg: lg, ttl: map[int64]int64{}, start: rev, rev: rev}, nil
}

// apply applies one revision. Revisions at or before the database's are
// skipped (a segment may overlap the full backup); a revision that does
// not follow the last one applied is a gap.
func (rp *replayer) apply(r *backup.SegmentRevision) error {
	for _, l := range r.Leases {
		if l.TTL > 0 {
			rp.ttl[l.ID] = l.TTL
		}
	}
	switch {
	case r.Revision <= rp.rev:
		return nil
	case rp.target != 0 && r.Revision > rp.target:
		return errReplayDone
	case !rp.until.IsZero() && r.Received.After(rp.until):
		return errReplayDone
	case r.Revision != rp.rev+1:
		return fmt.Errorf("%w: revision %d does not follow %d", ErrReplay, r.Revision, rp.rev)
	}
	// Leases first: the lessor writes them in a transaction of its own.
	for i := range r.Events {
		ev := &r.Events[i]
		if ev.Delete || ev.Lease == 0 || rp.le.Lookup(lease.LeaseID(ev.Lease)) != nil {
			continue
		}
		ttl, ok := rp.ttl[ev.Lease]
		if !ok {
			ttl = DefaultReplayLeaseTTL
		}
		if _, err := rp.le.Grant(lease.LeaseID(ev.Lease), ttl); err != nil {
			return fmt.Errorf("%w: grant lease %x: %w", ErrReplay, ev.Lease, err)
		}
	}
	txn := rp.kv.Write(traceutil.TODO())
	if err := checkHistory(txn, r); err != nil {
		txn.End() // nothing written: the revision stays
		return err
	}
	for i := range r.Events {
		ev := &r.Events[i]
		if ev.Delete {
			if n, _ := txn.DeleteRange(ev.Key, nil); n != 1 {
				txn.End()
				return fmt.Errorf("%w: revision %d deletes key %q, which the database does not hold", ErrReplay, r.Revision, ev.Key)
			}
			continue
		}
		// The key index keeps the key it is given: it may not share the
		// decoder's buffer, which the next revision reuses.
		txn.Put(bytes.Clone(ev.Key), ev.Value, lease.LeaseID(ev.Lease))
	}
	txn.End()
	if got := rp.kv.Rev(); got != r.Revision {
		return fmt.Errorf("%w: the store is at revision %d after applying revision %d", ErrReplay, got, r.Revision)
	}
	rp.rev = r.Revision
	rp.revisions++
	rp.events += int64(len(r.Events))
	return nil
}

// checkHistory compares, before r is applied, what the store will compute
// for its puts with what the source recorded: a key's create revision and
// version follow from the database's. A difference means the database is
// not the history the segment continues (another cluster's, or one
// restored to an earlier revision), and nothing is written.
func checkHistory(txn mvcc.TxnWrite, r *backup.SegmentRevision) error {
	for i := range r.Events {
		ev := &r.Events[i]
		if ev.Delete || ev.Version == 0 {
			continue // deletes carry nothing to compare
		}
		res, err := txn.Range(context.Background(), ev.Key, nil, mvcc.RangeOptions{})
		if err != nil {
			return fmt.Errorf("%w: read key %q: %w", ErrReplay, ev.Key, err)
		}
		create, version := r.Revision, int64(1)
		if len(res.KVs) == 1 {
			create, version = res.KVs[0].CreateRevision, res.KVs[0].Version+1
		}
		if create != ev.CreateRevision || version != ev.Version {
			return fmt.Errorf("%w: revision %d: key %q would have create revision %d and version %d here, %d and %d at the source: the database is another history",
				ErrReplay, r.Revision, ev.Key, create, version, ev.CreateRevision, ev.Version)
		}
	}
	return nil
}

// bump raises the store's revision by amount and marks it compacted, as
// etcdutl snapshot restore does with --bump-revision and
// --mark-compacted: watchers of the restored cluster never see a revision
// again that they saw before, and a watch from an older revision fails
// as compacted instead of reading another history.
func (rp *replayer) bump(amount int64) {
	tx := rp.be.BatchTx()
	tx.LockOutsideApply()
	defer tx.Unlock()
	latest := mvcc.Revision{Main: rp.kv.Rev() + amount}
	tx.UnsafePut(schema.Key, mvcc.RevToBytes(latest, mvcc.NewRevBytes()), []byte{})
	mvcc.UnsafeSetScheduledCompact(tx, latest.Main)
}

// settle makes the replayed store what a full backup of the source at its
// revision holds: it revokes the leases no key is attached to (the watch
// shows a revoke only as its keys' deletes, so replay never revokes one;
// a lease the source still holds with no key is dropped too), compacts
// the store at its revision as the source's own compaction would (a
// member restored from it refuses an older revision as compacted), and
// defragments the database, so that its size is that of the live data,
// not of every revision replayed.
func (rp *replayer) settle() error {
	for _, l := range rp.le.Leases() {
		if len(l.Keys()) > 0 {
			continue
		}
		if err := rp.le.Revoke(l.ID); err != nil && !errors.Is(err, lease.ErrLeaseNotFound) {
			return fmt.Errorf("%w: revoke lease %x, which holds no key: %w", ErrReplay, l.ID, err)
		}
	}
	done, err := rp.kv.Compact(traceutil.TODO(), rp.rev)
	switch {
	case errors.Is(err, mvcc.ErrCompacted):
		// Already compacted there (a full backup with no revision after it).
	case err != nil:
		return fmt.Errorf("%w: compact the store at revision %d: %w", ErrReplay, rp.rev, err)
	default:
		<-done
	}
	if rp.rev > rp.start {
		// etcd logs a failed compaction and closes done all the same.
		_, err := rp.kv.Range(context.Background(), []byte{0}, nil, mvcc.RangeOptions{Rev: rp.rev - 1, CountOnly: true})
		if !errors.Is(err, mvcc.ErrCompacted) {
			return fmt.Errorf("%w: the store is not compacted at revision %d (%v)", ErrReplay, rp.rev, err)
		}
	}
	rp.be.ForceCommit()
	if err := rp.be.Defrag(); err != nil {
		return fmt.Errorf("%w: defragment the replayed database: %w", ErrReplay, err)
	}
	return nil
}

// close commits and closes the database, and makes it durable; with a
// bump, raises its revision first (see bump).
func (rp *replayer) close(bump int64) error {
	rp.le.Stop()
	if bump > 0 {
		rp.bump(bump)
	}
	err := rp.kv.Close()
	rp.be.ForceCommit()
	if err := errors.Join(err, rp.be.Close()); err != nil {
		return err
	}
	f, err := os.OpenFile(rp.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("sync restored database: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync restored database: %w", err)
	}
	return nil
}
