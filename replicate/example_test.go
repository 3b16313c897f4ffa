package replicate_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"time"

	"gocloud.dev/blob/memblob"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/replicate"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// exampleSnapshotter serves a tiny stream shaped like an etcd snapshot.
type exampleSnapshotter struct{}

func (exampleSnapshotter) Snapshot(ctx context.Context) (*backup.Snapshot, error) {
	db := bytes.Repeat([]byte("etcd"), 1024)
	sum := sha256.Sum256(db)
	return backup.NewSnapshot(io.NopCloser(bytes.NewReader(append(db, sum[:]...))), backup.SnapshotInfo{}, nil), nil
}

// Copy a cluster's backups to a second store, then again: the second copy
// finds them there and skips them.
func ExampleCopier() {
	ctx := context.Background()
	primary := blob.New(memblob.OpenBucket(nil), nil)
	offsite := blob.New(memblob.OpenBucket(nil), nil)
	p := &backup.Pipeline{
		Snapshotter: exampleSnapshotter{},
		Now:         func() time.Time { return time.Date(2026, 11, 22, 2, 30, 0, 0, time.UTC) },
	}
	if _, err := p.Run(ctx, backup.Request{Cluster: "prod-a", Name: "nightly",
		Targets: []backup.Target{{Destination: "primary", Uploader: &backup.BucketUploader{Bucket: primary}}}}); err != nil {
		fmt.Println("backup failed:", err)
		return
	}

	c := &replicate.Copier{Source: primary, SourceName: "primary",
		Target: replicate.Target{Name: "offsite", Bucket: offsite}}
	for range 2 {
		rep, err := c.Copy(ctx, "prod-a", replicate.Selection{All: true})
		if err != nil {
			fmt.Println("copy failed:", err)
			return
		}
		for _, it := range rep.Items {
			fmt.Println(it.Outcome, it.ID)
		}
	}
	entries, _ := backup.ListBackups(ctx, offsite, "prod-a")
	fmt.Println(entries[0].Kind, entries[0].Manifest.Destination)
	// Output:
	// copied prod-a-nightly
	// skipped prod-a-nightly
	// backup offsite
}
