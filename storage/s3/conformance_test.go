package s3_test

import (
	"context"
	"testing"

	"github.com/etcdbackup/etcdbackup/internal/faultproxy"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/s3"
	"github.com/etcdbackup/etcdbackup/storage/storagetest"
)

// runConformance runs the suite on buckets reached through a fault proxy,
// which loses answers for the suite's lost-answer case.
func runConformance(t *testing.T, mod func(*s3.Options)) {
	srv := miniotest.Start(t)
	storagetest.Run(t, func(t *testing.T) storagetest.Fixture {
		proxy := faultproxy.StartHTTP(t, srv.Endpoint())
		b, name := newBucket(t, srv, false, func(o *s3.Options) {
			o.Endpoint = proxy.Addr()
			if mod != nil {
				mod(o)
			}
		})
		return storagetest.Fixture{
			Bucket: b,
			IncompleteUploads: func(ctx context.Context) ([]storage.Upload, error) {
				return srv.IncompleteUploads(ctx, name)
			},
			LoseAnswer: func(*testing.T) func() bool { return proxy.LoseNextAnswer(faultproxy.IsObjectCreation) },
		}
	})
}

func TestConformance(t *testing.T) {
	runConformance(t, nil)
}

// With 5 MiB parts two at a time, the suite's 64 MiB object takes 13 parts
// and its failures strike several parts in. The bodies go unsigned.
func TestConformanceSmallParts(t *testing.T) {
	runConformance(t, func(o *s3.Options) {
		o.PartSize = 5 * mib
		o.PartsInFlight = 2
		o.UnsignedPayload = true
	})
}

// The suite again through a prefix, as destinations use buckets.
func TestConformancePrefixed(t *testing.T) {
	srv := miniotest.Start(t)
	storagetest.Run(t, func(t *testing.T) storagetest.Fixture {
		b, name := newBucket(t, srv, false, nil)
		p, err := storage.WithPrefix(b, "backups/seed-1")
		if err != nil {
			t.Fatal(err)
		}
		return storagetest.Fixture{
			Bucket: p,
			IncompleteUploads: func(ctx context.Context) ([]storage.Upload, error) {
				return srv.IncompleteUploads(ctx, name)
			},
		}
	})
}
