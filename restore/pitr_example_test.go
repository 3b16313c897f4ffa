package restore_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
)

// Find what restoring revision 30 of a cluster reads: the newest full
// backup at or before it and the delta segments that lead from it to the
// revision. The segments here are stand-ins stored as a Follower stores
// them (only their manifests matter to FindPoint).
func ExampleFindPoint() {
	ctx := context.Background()
	bucket, err := blob.Open(ctx, drivers.NewURLMux(nil), "mem://", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer bucket.Close()
	dir, err := os.MkdirTemp("", "pitr-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// A full backup of a snapshot at revision 4.
	snap := filepath.Join(dir, "snapshot.db")
	if err := os.WriteFile(snap, gunzip(filepath.Join("testdata", "three-keys.db.gz")), 0o600); err != nil {
		log.Fatal(err)
	}
	at := time.Date(2026, 11, 22, 2, 0, 0, 0, time.UTC)
	p := &backup.Pipeline{Snapshotter: revisionSnapshotter{fileSnapshotter{snap}, 4}, Now: func() time.Time { return at }}
	target := []backup.Target{{Destination: "primary", Uploader: &backup.BucketUploader{Bucket: bucket}}}
	if _, err := p.Run(ctx, backup.Request{Cluster: "prod-a", Name: "full", Scheduled: true, Targets: target}); err != nil {
		log.Fatal(err)
	}
	for i, r := range [][2]int64{{5, 20}, {21, 40}, {41, 60}} {
		storeSegment(ctx, bucket, at.Add(time.Duration(i+1)*time.Second), r[0], r[1])
	}

	plan, err := restore.FindPoint(ctx, []restore.Source{{Name: "primary", Catalog: bucket}}, restore.Point{Cluster: "prod-a", Revision: 30})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("full:", plan.Full.ID)
	for _, s := range plan.Segments {
		fmt.Printf("segment: revisions %d to %d\n", s.Manifest.FirstRevision, s.Manifest.LastRevision)
	}
	// Output:
	// full: prod-a-full-20261122T020000.000Z
	// segment: revisions 5 to 20
	// segment: revisions 21 to 40
}

// revisionSnapshotter records a known revision for its snapshots.
type revisionSnapshotter struct {
	s   backup.Snapshotter
	rev int64
}

func (r revisionSnapshotter) Snapshot(ctx context.Context) (*backup.Snapshot, error) {
	snap, err := r.s.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	info := snap.Info()
	info.RevisionLow, info.RevisionHigh = r.rev, r.rev
	return backup.NewSnapshot(snap, info, nil), nil
}

// storeSegment stores a stand-in delta segment's data and manifest, of the
// chain of the full backup taken at 02:00 on 2026-11-22.
func storeSegment(ctx context.Context, b *blob.Bucket, created time.Time, first, last int64) {
	m := &backup.Manifest{Format: backup.DeltaManifestFormat, Kind: backup.ManifestKindDelta, Cluster: "prod-a",
		Name: fmt.Sprintf("delta-%d", first), Created: created, Completed: created, Compression: backup.None,
		FirstRevision: first, LastRevision: last, Chain: backup.BackupID("prod-a", "full", time.Date(2026, 11, 22, 2, 0, 0, 0, time.UTC), true),
		Raw: backup.Digest{Size: 4, SHA256: strings.Repeat("0", 64)}, Stored: backup.Digest{Size: 4, SHA256: strings.Repeat("0", 64)}}
	m.ID = backup.BackupID(m.Cluster, m.Name, created, true)
	m.DataKey = backup.DataKey(m.ID, created, backup.None, false)
	u := &backup.BucketUploader{Bucket: b}
	if err := u.Upload(ctx, m, bytes.NewReader([]byte("none"))); err != nil {
		log.Fatal(err)
	}
	if err := u.Commit(ctx, m); err != nil {
		log.Fatal(err)
	}
}

// Restore a member's data directory to the cluster's state at a revision:
// the full backup is restored as Restore does, then the segments' events
// are applied offline, one write transaction per revision, so that the
// member starts at exactly that revision.
func ExampleRestorer_RestorePoint() {
	ctx := context.Background()
	bucket, err := blob.Open(ctx, drivers.NewURLMux(nil), "file:///var/backups/etcd", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer bucket.Close()
	sources := []restore.Source{{Name: "primary", Catalog: bucket}}
	plan, err := restore.FindPoint(ctx, sources, restore.Point{Cluster: "prod-a", Revision: 1_234_567})
	if err != nil {
		log.Fatal(err) // restore.ErrNoChain: the revision lies in a gap
	}
	res, err := (&restore.Restorer{}).RestorePoint(ctx, plan, restore.Member{
		Name:     "etcd-0",
		DataDir:  "/var/lib/etcd-restored",
		PeerURLs: []string{"https://etcd-0.etcd:2380"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("restored revision %d from %s and %d segments (%d events in %s)\n",
		res.Revision, plan.Full.ID, res.Segments, res.Events, res.Replay)
}
