package backup_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"gocloud.dev/blob/memblob"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// Back up a cluster continuously: a full backup first (when the
// destination holds none), then every change as delta segments, stored
// within a second, until the process is interrupted. A real host uses a
// destination from a destination.Registry (it is both the Target and the
// Catalog) and registers backup.NewFollowerMetrics.
func ExampleFollower() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	endpoints := []string{"https://10.0.0.1:2379", "https://10.0.0.2:2379", "https://10.0.0.3:2379"}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: endpoints})
	if err != nil {
		log.Fatal(err)
	}
	bucket := blob.New(memblob.OpenBucket(nil), nil)
	f := &backup.Follower{
		Client:        cli,
		Pipeline:      &backup.Pipeline{Snapshotter: snapshotter, Compression: backup.Zstd},
		Cluster:       "prod-a",
		Targets:       []backup.Target{{Destination: "primary", Uploader: &backup.BucketUploader{Bucket: bucket}}},
		Catalogs:      []backup.Catalog{bucket},
		FlushInterval: time.Second,
		Observer: backup.FollowObserverFunc(func(e backup.FollowEvent) {
			if e.Kind == backup.ChainGap {
				log.Printf("revisions from %d on were compacted before they were stored", e.Revision)
			}
		}),
	}
	// Run returns once ctx ends and the segment it holds is stored.
	if err := f.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
