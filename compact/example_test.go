package compact_test

import (
	"context"
	"fmt"
	"log"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/compact"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
)

// Compact the chain a follower stores on a destination up to its last
// committed revision: the synthetic full backup is stored beside the
// chain, drilled first, and restores at or after its revision replay only
// the segments after it.
func ExampleCompactor_Compact() {
	ctx := context.Background()
	bucket, err := blob.Open(ctx, drivers.NewURLMux(nil), "file:///var/backups/etcd", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer bucket.Close()
	c := &compact.Compactor{
		Restorer: &restore.Restorer{TempDir: "/var/tmp"},
		Pipeline: &backup.Pipeline{Compression: backup.Zstd},
	}
	res, err := c.Compact(ctx, compact.Request{
		Cluster: "prod-a",
		Sources: []restore.Source{{Name: "primary", Catalog: bucket}},
		Targets: []compact.Target{{
			Target:  backup.Target{Destination: "primary", Uploader: &backup.BucketUploader{Bucket: bucket}},
			Catalog: bucket,
		}},
	})
	if err != nil {
		log.Fatal(err) // compact.ErrNothingToCompact: no segment after the newest full
	}
	fmt.Printf("%s: revision %d from %s and %d segments\n", res.ID, res.Revision, res.Synthetic.Base, res.Synthetic.Segments)
}
