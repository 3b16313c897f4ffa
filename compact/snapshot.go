package compact

import (
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/cleanup"
	"github.com/etcdbackup/etcdbackup/restore"
)

// databaseSnapshotter serves the replayed database as etcd serves a
// snapshot: the bbolt file followed by its sha256, so that the pipeline
// checks and stores it as it does any snapshot.
type databaseSnapshotter struct {
	path string
	info backup.SnapshotInfo
}

var _ backup.Snapshotter = (*databaseSnapshotter)(nil)

// Snapshot implements backup.Snapshotter.
func (d *databaseSnapshotter) Snapshot(ctx context.Context) (*backup.Snapshot, error) {
	f, err := os.Open(d.path)
	if err != nil {
		return nil, fmt.Errorf("open replayed database: %w", err)
	}
	info := d.info
	if fi, err := f.Stat(); err == nil {
		info.DBSize, info.DBSizeInUse = fi.Size(), fi.Size()
	}
	info.Started = time.Now()
	rc := &trailed{ctx: ctx, f: f, h: sha256.New()}
	return backup.NewSnapshot(rc, info, nil), nil
}

// snapshotInfo describes the synthetic snapshot: the base full backup's
// member and versions, at exactly rev.
func snapshotInfo(base *backup.Manifest, rev int64) backup.SnapshotInfo {
	id := func(s string) uint64 {
		v, _ := strconv.ParseUint(s, 16, 64)
		return v
	}
	return backup.SnapshotInfo{
		Endpoint:       "compaction",
		MemberID:       id(base.Etcd.MemberID),
		MemberName:     base.Etcd.MemberName,
		ClusterID:      id(base.Etcd.ClusterID),
		EtcdVersion:    base.Etcd.Version,
		StorageVersion: base.Etcd.StorageVersion,
		RevisionLow:    rev,
		RevisionHigh:   rev,
	}
}

// trailed reads a file, then its sha256: etcd's snapshot stream.
type trailed struct {
	ctx     context.Context
	f       *os.File
	h       hash.Hash
	trailer []byte
	eof     bool
}

func (t *trailed) Read(p []byte) (int, error) {
	if err := t.ctx.Err(); err != nil {
		return 0, err
	}
	if !t.eof {
		n, err := t.f.Read(p)
		t.h.Write(p[:n])
		if err == io.EOF {
			t.eof, t.trailer = true, t.h.Sum(nil)
			err = nil
		}
		if n > 0 || err != nil {
			return n, err
		}
	}
	if len(t.trailer) == 0 {
		return 0, io.EOF
	}
	n := copy(p, t.trailer)
	t.trailer = t.trailer[n:]
	return n, nil
}

func (t *trailed) Close() error { return t.f.Close() }

// drilledUploader drills a backup's stored data object, read back from
// the destination, before it writes the manifest.
type drilledUploader struct {
	backup.Uploader
	catalog  backup.Catalog
	source   string
	restorer *restore.Restorer
	// want is the replayed database's status: the drill must restore its
	// revision and number of keys.
	want restore.SnapshotStatus
}

// Commit drills the uploaded object, then commits it. A failed drill
// removes the data object when it can prove it its own (see
// backup.RemoveOwnData), else leaves it to retention as an orphan.
func (u *drilledUploader) Commit(ctx context.Context, m *backup.Manifest) error {
	if err := u.drill(ctx, m); err != nil {
		if bu, ok := u.Uploader.(*backup.BucketUploader); ok {
			cctx, cancel := cleanup.Context(ctx, time.Minute)
			defer cancel()
			_ = backup.RemoveOwnData(cctx, bu.Bucket, m)
		}
		return err
	}
	return u.Uploader.Commit(ctx, m)
}

func (u *drilledUploader) drill(ctx context.Context, m *backup.Manifest) error {
	key := backup.ClusterPrefix(m.Cluster) + m.DataKey
	b := restore.Backup{Source: u.source, Catalog: u.catalog, Entry: backup.Entry{
		Kind: backup.KindBackup, Cluster: m.Cluster, ID: m.ID, Key: key,
		ManifestKey: backup.ClusterPrefix(m.Cluster) + backup.ManifestKey(m.DataKey),
		Manifest:    m, Created: m.Created, Size: m.Stored.Size, Compression: m.Compression,
	}}
	res, err := u.restorer.Drill(ctx, b)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDrill, err)
	}
	if res.Status.Revision != u.want.Revision || res.Status.TotalKeys != u.want.TotalKeys {
		return fmt.Errorf("%w: it restores revision %d with %d keys, the replay reached revision %d with %d keys",
			ErrDrill, res.Status.Revision, res.Status.TotalKeys, u.want.Revision, u.want.TotalKeys)
	}
	return nil
}

// UploadsExclusively passes the wrapped uploader's answer on (see
// backup.ExclusiveUploader).
func (u *drilledUploader) UploadsExclusively() bool {
	eu, ok := u.Uploader.(backup.ExclusiveUploader)
	return ok && eu.UploadsExclusively()
}

var (
	_ backup.Uploader          = (*drilledUploader)(nil)
	_ backup.ExclusiveUploader = (*drilledUploader)(nil)
)
