package destination_test

import (
	"context"
	"iter"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/memblob"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// heldListing is a bucket whose next listing, once armed, is taken at
// once and handed out only when released: a sync whose listing predates
// what happens meanwhile.
type heldListing struct {
	storage.Bucket
	armed    chan struct{} // receives once per held listing
	listed   chan struct{}
	released chan struct{}
}

func (b *heldListing) List(ctx context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error] {
	select {
	case <-b.armed:
	default:
		return b.Bucket.List(ctx, prefix)
	}
	var infos []storage.ObjectInfo
	var lerr error
	for info, err := range b.Bucket.List(ctx, prefix) {
		if err != nil {
			lerr = err
			break
		}
		infos = append(infos, info)
	}
	b.listed <- struct{}{}
	<-b.released
	return func(yield func(storage.ObjectInfo, error) bool) {
		for _, info := range infos {
			if !yield(info, nil) {
				return
			}
		}
		if lerr != nil {
			yield(storage.ObjectInfo{}, lerr)
		}
	}
}

// TestInventorySyncKeepsChangesMadeWhileListing: a commit and a delete
// made through the destination while a sync lists are kept by that sync:
// the deleted backup does not come back, the committed one is not hidden,
// and neither is reported the wrong way.
func TestInventorySyncKeepsChangesMadeWhileListing(t *testing.T) {
	ctx := testCtx(t)
	gb := memblob.OpenBucket(nil)
	t.Cleanup(func() { _ = gb.Close() })
	held := &heldListing{Bucket: blob.New(gb, nil), armed: make(chan struct{}, 1),
		listed: make(chan struct{}), released: make(chan struct{})}
	obs := &events{}
	r := newRegistry(t, destination.Options{Observer: obs, Schemes: map[string]destination.Opener{
		"held": func(context.Context, destination.Location) (storage.Bucket, error) { return held, nil },
	}})
	d, err := r.Add(ctx, destination.Spec{Name: "eu", URL: "held://b/seed"})
	require.NoError(t, err)
	old := runBackup(t, ctx, "prod-a", "nightly", 1, d.Target())
	_, err = r.Sync(ctx, "eu")
	require.NoError(t, err)

	held.armed <- struct{}{}
	type result struct {
		inv destination.Inventory
		err error
	}
	done := make(chan result, 1)
	go func() {
		inv, err := r.Sync(ctx, "eu")
		done <- result{inv, err}
	}()
	<-held.listed
	fresh := runBackup(t, ctx, "prod-a", "adhoc", 2, d.Target())
	m := old.Outcomes[0].Manifest
	require.NoError(t, d.Delete(ctx, backup.ClusterPrefix(m.Cluster)+backup.ManifestKey(m.DataKey)))
	require.NoError(t, d.Delete(ctx, backup.ClusterPrefix(m.Cluster)+m.DataKey))
	close(held.released)
	res := <-done
	require.NoError(t, res.err)

	has := func(entries []destination.Entry, id string) bool {
		return slices.ContainsFunc(entries, func(e destination.Entry) bool { return e.ID == id })
	}
	for _, inv := range []destination.Inventory{res.inv, d.Inventory()} {
		require.True(t, has(inv.Entries, fresh.ID), "the backup committed during the listing is shown")
		require.False(t, has(inv.Entries, old.ID), "the backup deleted during the listing stays gone")
		require.False(t, has(inv.Removed, fresh.ID), "the commit is not reported removed")
		require.False(t, has(inv.Added, old.ID), "the delete is not reported added")
	}
	for _, ev := range obs.of(destination.InventoryChanged, "eu") {
		require.False(t, has(ev.Removed, fresh.ID), "no event reports the commit removed")
	}
}
