package destination_test

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
)

func kindsOf(entries []destination.Entry) map[backup.Kind]int {
	m := map[backup.Kind]int{}
	for _, e := range entries {
		m[e.Kind]++
	}
	return m
}

func TestInventorySync(t *testing.T) {
	ctx := testCtx(t)
	obs := &events{}
	r := newRegistry(t, destination.Options{Observer: obs})
	eu, err := r.Add(ctx, mem("eu", "mem://eu"))
	require.NoError(t, err)
	us, err := r.Add(ctx, mem("us", "mem://us"))
	require.NoError(t, err)

	first := runBackup(t, ctx, "prod-a", "nightly", 1, eu.Target(), us.Target())
	runBackup(t, ctx, "prod-b", "nightly", 2, eu.Target())
	put := func(key string, body []byte) {
		t.Helper()
		require.NoError(t, eu.Put(ctx, key, bytes.NewReader(body), nil))
	}
	put("prod-a/etcd-snapshot-2024.db", rawSnapshot(2, 5))               // legacy: etcdctl snapshot save
	put("prod-a/20260101T000000Z_prod-a-crashed.db.zst", []byte("half")) // orphan: never committed
	put("prod-a/notes/readme.txt", []byte("hello"))                      // foreign
	put("README", []byte("top level, not in a cluster folder"))
	put("Not_A_Cluster/x.db", []byte("folder that is not a cluster name"))

	inv, err := r.Sync(ctx, "eu")
	require.NoError(t, err)
	assert.Equal(t, "eu", inv.Destination)
	assert.False(t, inv.Synced.IsZero())
	assert.Equal(t, []string{"prod-a", "prod-b"}, inv.Clusters())
	assert.Equal(t, map[backup.Kind]int{backup.KindBackup: 2, backup.KindLegacy: 1, backup.KindOrphan: 1, backup.KindForeign: 1},
		kindsOf(inv.Entries))
	assert.Len(t, inv.Added, 5, "the first sync finds everything new")
	assert.Empty(t, inv.Removed)
	for _, e := range inv.Entries {
		assert.Equal(t, "eu", e.Destination)
	}
	assert.Len(t, obs.of(destination.InventoryChanged, "eu"), 1)

	// Nothing changed: nothing added or removed, no event.
	inv, err = r.Sync(ctx, "eu")
	require.NoError(t, err)
	assert.Empty(t, inv.Added)
	assert.Empty(t, inv.Removed)
	assert.Len(t, inv.Entries, 5)
	assert.Len(t, obs.of(destination.InventoryChanged, "eu"), 1)

	// One backup more, the legacy snapshot gone: through the registry,
	// the inventory shows both at once, before any sync, and says so.
	third := runBackup(t, ctx, "prod-a", "adhoc", 3, eu.Target())
	require.NoError(t, eu.Delete(ctx, "prod-a/etcd-snapshot-2024.db"))
	now := eu.Inventory()
	require.Len(t, now.Entries, 5)
	assert.True(t, slices.ContainsFunc(now.Entries, func(e destination.Entry) bool { return e.ID == third.ID }), "the commit, at once")
	assert.False(t, slices.ContainsFunc(now.Entries, func(e destination.Entry) bool { return e.Kind == backup.KindLegacy }), "the delete, at once")
	changes := obs.of(destination.InventoryChanged, "eu")
	require.Len(t, changes, 3)
	require.Len(t, changes[1].Added, 1)
	assert.Equal(t, third.ID, changes[1].Added[0].ID)
	require.Len(t, changes[2].Removed, 1)
	assert.Equal(t, backup.KindLegacy, changes[2].Removed[0].Kind)
	inv, err = r.Sync(ctx, "eu")
	require.NoError(t, err)
	assert.Empty(t, inv.Added, "the sync agrees")
	assert.Empty(t, inv.Removed)
	assert.Equal(t, now.Entries, inv.Entries)

	// Per cluster, across destinations.
	_, err = r.Sync(ctx, "us")
	require.NoError(t, err)
	var found []string
	for _, e := range r.Entries("prod-a") {
		if e.Kind == backup.KindBackup {
			found = append(found, e.Destination+":"+e.ID)
		}
	}
	assert.ElementsMatch(t, []string{"eu:" + first.ID, "us:" + first.ID, "eu:" + third.ID}, found)
	assert.Empty(t, r.Entries("prod-c"))
}

// A destination moved to another location starts its inventory afresh;
// a credential-only change keeps it.
func TestInventoryAcrossUpdates(t *testing.T) {
	ctx := testCtx(t)
	r := newRegistry(t, destination.Options{})
	eu, err := r.Add(ctx, mem("eu", "mem://eu"))
	require.NoError(t, err)
	runBackup(t, ctx, "prod-a", "nightly", 1, eu.Target())
	_, err = r.Sync(ctx, "eu")
	require.NoError(t, err)

	_, err = r.Update(ctx, "eu", destination.Spec{URL: "mem://eu", PollInterval: 1e9})
	require.NoError(t, err)
	assert.Len(t, eu.Inventory().Entries, 1, "same location: inventory kept")

	_, err = r.Update(ctx, "eu", mem("eu", "mem://elsewhere"))
	require.NoError(t, err)
	inv := eu.Inventory()
	assert.Empty(t, inv.Entries, "moved: inventory dropped")
	assert.True(t, inv.Synced.IsZero())
	assert.Equal(t, destination.StateUnknown, eu.Status().State)
}

// A failed sync keeps what the last good one found, and says why.
func TestInventorySyncFailure(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	r := newRegistry(t, destination.Options{})
	d, err := r.Add(ctx, destination.Spec{Name: "local", URL: "file://" + dir})
	require.NoError(t, err)
	runBackup(t, ctx, "prod-a", "nightly", 1, d.Target())
	_, err = r.Sync(ctx, "local")
	require.NoError(t, err)

	// A manifest that cannot be read for another reason than its content
	// fails the sync; the last good inventory stays.
	require.NoError(t, d.Put(ctx, "prod-a/20260101T000000Z_prod-a-x.manifest.json", strings.NewReader("{"), nil))
	inv, err := r.Sync(ctx, "local")
	require.NoError(t, err, "an invalid manifest is an entry, not a failure")
	assert.Equal(t, 1, kindsOf(inv.Entries)[backup.KindInvalid])

	// The directory goes away: the sync fails, the last good inventory
	// stays, with the error.
	require.NoError(t, os.RemoveAll(dir))
	inv, err = r.Sync(ctx, "local")
	require.Error(t, err)
	assert.Equal(t, err, inv.Err)
	assert.Len(t, inv.Entries, 2, "kept")
	assert.False(t, inv.Synced.IsZero())
}
