package backup_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"time"

	"gocloud.dev/blob/memblob"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// exampleSnapshotter serves a tiny stream shaped like an etcd snapshot: a
// "database" of whole 512-byte blocks and its sha256 trailer.
type exampleSnapshotter struct{}

func (exampleSnapshotter) Snapshot(ctx context.Context) (*backup.Snapshot, error) {
	db := bytes.Repeat([]byte("etcd"), 1024)
	sum := sha256.Sum256(db)
	stream := append(db, sum[:]...)
	return backup.NewSnapshot(io.NopCloser(bytes.NewReader(stream)), backup.SnapshotInfo{EtcdVersion: "3.7.3"}, nil), nil
}

// Back up to two in-memory destinations at once and list what one holds.
// A real host uses backup.NewEtcdSnapshotter and destinations from a
// destination.Registry.
func ExamplePipeline() {
	ctx := context.Background()
	east := blob.New(memblob.OpenBucket(nil), nil)
	west := blob.New(memblob.OpenBucket(nil), nil)

	p := &backup.Pipeline{
		Snapshotter: exampleSnapshotter{},
		Compression: backup.Zstd,
		Now:         func() time.Time { return time.Date(2026, 11, 22, 2, 30, 0, 0, time.UTC) },
	}
	res, err := p.Run(ctx, backup.Request{
		Cluster:   "prod-a",
		Name:      "hourly",
		Scheduled: true,
		Targets: []backup.Target{
			{Destination: "east", Uploader: &backup.BucketUploader{Bucket: east}},
			{Destination: "west", Uploader: &backup.BucketUploader{Bucket: west}},
		},
	})
	if err != nil {
		fmt.Println("backup failed:", err)
		return
	}
	fmt.Println("backup", res.ID, "committed on", res.Succeeded())
	fmt.Println("raw bytes:", res.Raw.Size)

	entries, err := backup.ListBackups(ctx, west, "prod-a")
	if err != nil {
		fmt.Println("list failed:", err)
		return
	}
	for _, e := range entries {
		fmt.Println(e.Kind, e.Key)
	}
	// Output:
	// backup prod-a-hourly-20261122T023000.000Z committed on [east west]
	// raw bytes: 4128
	// backup prod-a/20261122T023000.000Z_prod-a-hourly-20261122T023000.000Z.db.zst
}
