package storagetest_test

import (
	"bytes"
	"context"
	"io"
	"iter"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/memblob"

	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/storagetest"
)

// checkThenWrite is a bucket whose PutIfAbsent checks with Stat and then
// Puts: the mistake the exclusive-race case exists to catch. A barrier
// between the check and the write lets every racing writer check first,
// so that the race is lost every time rather than now and then.
type checkThenWrite struct {
	*blob.Bucket
	writers int

	mu      sync.Mutex
	arrived int
	release chan struct{}
}

func (b *checkThenWrite) PutIfAbsent(ctx context.Context, key string, r io.Reader, opts *storage.PutOptions) error {
	if _, err := b.Stat(ctx, key); err == nil {
		return storage.Errorf("put", key, storage.ErrExist, nil)
	}
	b.mu.Lock()
	b.arrived++
	if b.arrived == b.writers {
		close(b.release)
	}
	release := b.release
	b.mu.Unlock()
	select {
	case <-release:
	case <-time.After(5 * time.Second):
	}
	return b.Put(ctx, key, r, opts)
}

func TestExclusiveRaceCatchesCheckThenWrite(t *testing.T) {
	racy := &checkThenWrite{Bucket: blob.New(memblob.OpenBucket(nil), nil), writers: 4, release: make(chan struct{})}
	err := storagetest.CheckExclusiveRace(t.Context(), racy, "k", 4, 1024)
	require.Error(t, err)
	require.Contains(t, err.Error(), "both succeeded")

	honest := blob.New(memblob.OpenBucket(nil), nil)
	require.NoError(t, storagetest.CheckExclusiveRace(t.Context(), honest, "k", 4, 1024))
}

// hidingLister is a bucket whose List drops every third key, as a store
// that loses keys while others are written would.
type hidingLister struct{ *blob.Bucket }

func (b hidingLister) List(ctx context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error] {
	return func(yield func(storage.ObjectInfo, error) bool) {
		i := 0
		for info, err := range b.Bucket.List(ctx, prefix) {
			if i++; err == nil && i%3 == 0 {
				continue
			}
			if !yield(info, err) {
				return
			}
		}
	}
}

func TestListDuringWritesCatchesLostKeys(t *testing.T) {
	b := hidingLister{blob.New(memblob.OpenBucket(nil), nil)}
	stable := []string{"p/a", "p/b", "p/c", "p/d"}
	for _, k := range stable {
		require.NoError(t, b.Put(t.Context(), k, bytes.NewReader([]byte(k)), nil))
	}
	err := storagetest.CheckListDuringWrites(t.Context(), b, "p/", stable, 3)
	require.ErrorContains(t, err, "misses")
}
