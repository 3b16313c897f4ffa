package destination

import (
	"context"
	"fmt"
	"testing"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// BenchmarkInventorySync measures one inventory sync of a MinIO bucket
// holding 10 clusters x 20 backups: cold (every manifest read) and warm
// (manifests unchanged since the previous sync, none read).
//
//	go test -run XXX -bench InventorySync -benchtime 20x ./destination/
func BenchmarkInventorySync(b *testing.B) {
	srv := miniotest.Start(b)
	name := srv.NewBucket(b, miniotest.BucketOptions{})
	bucket, err := s3.New(srv.S3Options(name))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const clusters, perCluster = 10, 20
	raw := rawBench()
	for c := range clusters {
		for i := range perCluster {
			p := backup.Pipeline{Snapshotter: rawSnapshotter(raw), Compression: backup.None}
			_, err := p.Run(ctx, backup.Request{Cluster: fmt.Sprintf("cluster-%02d", c), Name: fmt.Sprintf("b%02d", i),
				Targets: []backup.Target{{Destination: "d", Uploader: &backup.BucketUploader{Bucket: bucket}}}})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			entries, _, err := listInventory(ctx, "d", bucket, nil, nil)
			if err != nil || len(entries) != clusters*perCluster {
				b.Fatalf("%d entries, %v", len(entries), err)
			}
		}
		b.ReportMetric(float64(clusters*perCluster), "backups")
	})
	b.Run("warm", func(b *testing.B) {
		_, cache, err := listInventory(ctx, "d", bucket, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			entries, next, err := listInventory(ctx, "d", bucket, cache, nil)
			if err != nil || len(entries) != clusters*perCluster {
				b.Fatalf("%d entries, %v", len(entries), err)
			}
			cache = next
		}
		b.ReportMetric(float64(clusters*perCluster), "backups")
	})
}

func rawBench() string {
	body := make([]byte, 4096)
	for i := range body {
		body[i] = byte(i)
	}
	sum := sha256Sum(body)
	return string(body) + string(sum[:])
}

// BenchmarkParseURL measures parsing a full S3 destination URL.
func BenchmarkParseURL(b *testing.B) {
	const u = "s3://etcd-backups/seed-eu/prod?endpoint=minio.backup.svc:9000&region=us-east-1&insecure=true&pathStyle=true"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseURL(u); err != nil {
			b.Fatal(err)
		}
	}
}
