package backup_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"gocloud.dev/blob/memblob"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

func TestListBackupsClassifies(t *testing.T) {
	ctx := t.Context()
	b := blob.New(memblob.OpenBucket(nil), nil)
	p := &backup.Pipeline{Snapshotter: newSnapshotter(fakeSnapshot(t, 100, 1)), Now: fixedClock()}
	run := func(cluster, name string) *backup.Manifest {
		res, err := p.Run(ctx, backup.Request{Cluster: cluster, Name: name, Scheduled: true,
			Targets: []backup.Target{{Destination: "d", Uploader: &backup.BucketUploader{Bucket: b}}}})
		require.NoError(t, err)
		return res.Outcomes[0].Manifest
	}
	first := run("prod-a", "daily")
	p.Snapshotter = newSnapshotter(fakeSnapshot(t, 100, 2))
	second := run("prod-a", "hourly")
	p.Snapshotter = newSnapshotter(fakeSnapshot(t, 100, 3))
	run("prod-ab", "daily")

	put := func(key, body string) {
		require.NoError(t, b.Put(ctx, key, bytes.NewReader([]byte(body)), nil))
	}
	put("prod-a/snapshot.db", "legacy raw")
	put("prod-a/prod-a-old-2021.gz", "legacy gzip")
	put("prod-a/20261122T023000Z_prod-a-crashed.db.zst", "orphan")
	put("prod-a/nested/thing.db", "foreign")
	put("prod-a/broken.manifest.json", `{"format": 1, "id": "../../etc"}`)
	put("prod-a/20261122T023000Z_prod-a-x.manifest.json", "not json")

	entries, err := backup.ListBackups(ctx, b, "prod-a")
	require.NoError(t, err)
	kinds := map[backup.Kind][]string{}
	for _, e := range entries {
		require.Equal(t, "prod-a", e.Cluster)
		kinds[e.Kind] = append(kinds[e.Kind], e.ID)
	}
	require.Equal(t, []string{first.ID, second.ID}, kinds[backup.KindBackup], "in creation order")
	require.ElementsMatch(t, []string{"snapshot.db", "prod-a-old-2021.gz"}, kinds[backup.KindLegacy])
	require.Equal(t, []string{"20261122T023000Z_prod-a-crashed.db.zst"}, kinds[backup.KindOrphan])
	require.Equal(t, []string{"nested/thing.db"}, kinds[backup.KindForeign])
	require.Len(t, kinds[backup.KindInvalid], 2)
	for _, e := range entries {
		switch e.ID {
		case "prod-a-old-2021.gz":
			require.Equal(t, backup.Gzip, e.Compression)
			require.True(t, e.Restorable())
		case "snapshot.db":
			require.Equal(t, backup.None, e.Compression)
		}
		if e.Kind == backup.KindInvalid {
			require.ErrorIs(t, e.Problem, backup.ErrInvalidManifest)
			require.False(t, e.Restorable())
		}
	}

	// The manifest of a deleted data object makes an invalid entry.
	require.NoError(t, b.Delete(ctx, "prod-a/"+first.DataKey))
	entries, err = backup.ListBackups(ctx, b, "prod-a")
	require.NoError(t, err)
	for _, e := range entries {
		if e.ManifestKey == "prod-a/"+backup.ManifestKey(first.DataKey) {
			require.Equal(t, backup.KindInvalid, e.Kind)
			require.ErrorContains(t, e.Problem, "missing")
		}
	}

	_, err = backup.ListBackups(ctx, b, "../prod-a")
	require.ErrorIs(t, err, backup.ErrInvalidName)
}

// slowCatalog delays every Get and records how many were in flight at
// once; failKey's Get fails as a store outage would.
type slowCatalog struct {
	backup.Catalog
	delay             time.Duration
	failKey           string
	inFlight, maxSeen atomic.Int32
}

func (c *slowCatalog) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	n := c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	for {
		m := c.maxSeen.Load()
		if n <= m || c.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	select {
	case <-time.After(c.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if key == c.failKey {
		return nil, errors.New("store outage")
	}
	return c.Catalog.Get(ctx, key)
}

// TestListBackupsReadsManifestsConcurrently checks that the manifests of a
// folder are read several at a time, never more than the bound, with the
// same result as one at a time, and that an outage reading one fails the
// whole listing.
func TestListBackupsReadsManifestsConcurrently(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := t.Context()
	b := blob.New(memblob.OpenBucket(nil), nil)
	for i := range 20 {
		p := &backup.Pipeline{Snapshotter: newSnapshotter(fakeSnapshot(t, 10, uint64(i))), Now: func() time.Time {
			return time.Date(2026, 11, 22, 0, i, 0, 0, time.UTC)
		}}
		_, err := p.Run(ctx, backup.Request{Cluster: "prod-a", Name: fmt.Sprintf("b%d", i),
			Targets: []backup.Target{{Destination: "d", Uploader: &backup.BucketUploader{Bucket: b}}}})
		require.NoError(t, err)
	}
	serial, err := backup.ListBackups(ctx, b, "prod-a")
	require.NoError(t, err)
	require.Len(t, serial, 20)

	slow := &slowCatalog{Catalog: b, delay: 20 * time.Millisecond}
	entries, err := backup.ListBackups(ctx, slow, "prod-a")
	require.NoError(t, err)
	require.Equal(t, serial, entries)
	require.Greater(t, slow.maxSeen.Load(), int32(1), "manifests were read one at a time")
	require.LessOrEqual(t, slow.maxSeen.Load(), int32(8), "more manifests in flight than the bound")

	slow = &slowCatalog{Catalog: b, delay: time.Millisecond, failKey: serial[7].ManifestKey}
	_, err = backup.ListBackups(ctx, slow, "prod-a")
	require.ErrorContains(t, err, "store outage")
	require.ErrorContains(t, err, serial[7].ManifestKey)
}

// TestListBackupsKeepsWhatAnInvalidManifestTells: an invalid manifest's
// entry carries what of it decoded leniently (Unverified): a newer
// format's fields, those around a field of another type; nothing for a
// manifest that is not JSON. Its Manifest stays nil.
func TestListBackupsKeepsWhatAnInvalidManifestTells(t *testing.T) {
	ctx := t.Context()
	b := blob.New(memblob.OpenBucket(nil), nil)
	put := func(key, body string) {
		require.NoError(t, b.Put(ctx, key, bytes.NewReader([]byte(body)), nil))
	}
	put("prod/a.manifest.json", `{"format": 9, "name": "daily", "created": "2026-11-01T00:00:00Z"}`)
	put("prod/b.manifest.json", `{"format": "2", "name": "hourly", "config": "c", "kind": "delta", "chain": "x"}`)
	put("prod/c.manifest.json", `not json`)
	put("prod/d.manifest.json", `null`)
	put("prod/e.manifest.json", `["name", "daily"]`)
	entries, err := backup.ListBackups(ctx, b, "prod")
	require.NoError(t, err)
	got := map[string]*backup.Manifest{}
	for _, e := range entries {
		require.Equal(t, backup.KindInvalid, e.Kind, e.ID)
		require.Nil(t, e.Manifest, e.ID)
		require.ErrorIs(t, e.Problem, backup.ErrInvalidManifest, e.ID)
		got[e.ID] = e.Unverified
	}
	require.NotNil(t, got["a.manifest.json"])
	require.Equal(t, "daily", got["a.manifest.json"].Name)
	require.True(t, got["a.manifest.json"].Created.Equal(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)))
	require.NotNil(t, got["b.manifest.json"])
	require.Equal(t, backup.Manifest{Name: "hourly", Config: "c", Kind: "delta", Chain: "x"}, *got["b.manifest.json"])
	for _, id := range []string{"c.manifest.json", "d.manifest.json", "e.manifest.json"} {
		v, listed := got[id]
		require.True(t, listed, id)
		require.Nil(t, v, "%s is not a JSON object", id)
	}
}
