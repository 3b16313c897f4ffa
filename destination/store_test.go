package destination_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/storage"
)

// segmentManifest is a valid manifest of a small data object.
func segmentManifest(body string) *backup.Manifest {
	created := time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)
	return &backup.Manifest{
		Format: backup.ManifestFormat, ID: "prod-a-delta-11", Cluster: "prod-a", Name: "delta-11", Created: created,
		Completed: created, DataKey: "20261128T040000.000Z_prod-a-delta-11.db", Compression: backup.None, Run: "0123abcd",
		Raw:    backup.Digest{Size: int64(len(body)), SHA256: strings.Repeat("0", 64)},
		Stored: backup.Digest{Size: int64(len(body)), SHA256: strings.Repeat("0", 64)},
	}
}

// TestStoreThroughDestination: a file destination stores a backup in one
// call (backup.Storer), adds it to its inventory as Commit does, and says
// so; a read-only one and one whose bucket cannot stage (mem://) refuse
// with storage.ErrUnsupported, writing nothing, so that the follower
// uploads and commits (and a read-only one then refuses that).
func TestStoreThroughDestination(t *testing.T) {
	ctx := testCtx(t)
	obs := &events{}
	r := newRegistry(t, destination.Options{Observer: obs})
	file, err := r.Add(ctx, destination.Spec{Name: "file", URL: "file://" + t.TempDir()})
	require.NoError(t, err)
	_, err = r.Sync(ctx, "file")
	require.NoError(t, err)
	committing, err := file.Store(ctx, segmentManifest("segment"), strings.NewReader("segment"))
	require.NoError(t, err)
	assert.True(t, committing)
	entries := file.Inventory().Entries
	require.Len(t, entries, 1)
	assert.Equal(t, "prod-a-delta-11", entries[0].Manifest.ID)
	assert.Len(t, obs.of(destination.InventoryChanged, "file"), 1, "the commit's inventory change")
	listed, err := backup.ListBackups(ctx, file, "prod-a")
	require.NoError(t, err)
	require.Len(t, listed, 1)
	assert.Equal(t, backup.KindBackup, listed[0].Kind)

	ro, err := r.Add(ctx, destination.Spec{Name: "ro", URL: "file://" + t.TempDir(), ReadOnly: true})
	require.NoError(t, err)
	memory, err := r.Add(ctx, mem("mem", "mem://seg"))
	require.NoError(t, err)
	for _, d := range []*destination.Destination{ro, memory} {
		committing, err := d.Store(ctx, segmentManifest("x"), strings.NewReader("x"))
		require.True(t, errors.Is(err, storage.ErrUnsupported), "%s: %v", d.Name(), err)
		assert.False(t, committing, d.Name())
		listed, err := backup.ListBackups(ctx, d, "prod-a")
		require.NoError(t, err)
		assert.Empty(t, listed, d.Name())
	}
}
