package replicate

import (
	"context"
	"io"
	"iter"
	"sync/atomic"
	"testing"

	"github.com/etcdbackup/etcdbackup/storage"
)

type countingBucket struct {
	storage.Bucket
	n atomic.Int64
}

func (c *countingBucket) Get(ctx context.Context, k string) (io.ReadCloser, error) {
	c.n.Add(1)
	return c.Bucket.Get(ctx, k)
}
func (c *countingBucket) List(ctx context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error] {
	c.n.Add(1)
	return c.Bucket.List(ctx, prefix)
}

func (c *countingBucket) Stat(ctx context.Context, k string) (storage.ObjectInfo, error) {
	c.n.Add(1)
	return c.Bucket.Stat(ctx, k)
}

// TestCopyNoopRerunRequests: a rerun that has nothing to copy lists the
// target once and reads each manifest (concurrently, as a listing does),
// and looks again for each chain's full backup (a prune may have deleted
// it meanwhile), instead of two sequential requests per backup.
func TestCopyNoopRerunRequests(t *testing.T) {
	ctx := context.Background()
	src, raw := memBucket(), memBucket()
	f := full(t, src, 0, 10)
	for r := int64(11); r < 11+2*200; r += 2 {
		segment(t, src, f, r, r+1)
	}
	if _, err := copier(src, raw).Copy(ctx, "prod", Selection{All: true}); err != nil {
		t.Fatal(err)
	}
	cb := &countingBucket{Bucket: raw}
	rep, err := copier(src, cb).Copy(ctx, "prod", Selection{All: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("no-op rerun over %d backups: %d target requests", len(rep.Items), cb.n.Load())
	if got, most := cb.n.Load(), int64(len(rep.Items)+1+len(rep.Chains)); got > most || rep.Count(Skipped) != len(rep.Items) {
		t.Fatalf("no-op rerun: %d target requests for %d backups (want at most %d), %d skipped", got, len(rep.Items), most, rep.Count(Skipped))
	}
}
