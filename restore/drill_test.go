package restore_test

import (
	"context"
	"path/filepath"
	"testing"

	"filippo.io/age"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/restore"
)

func TestDrill(t *testing.T) {
	snap := writeFile(t, "snapshot.db", smallSnapshot(t))
	want, err := restore.Status(snap)
	require.NoError(t, err)
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	b := memBucket(t)
	m := runBackup(t, fileSnapshotter{snap}, b, "prod-a", "nightly", backup.Zstd, id.Recipient().String())
	sources := []restore.Source{{Name: "mem", Catalog: b}}
	found, err := restore.Find(t.Context(), sources, restore.Query{Cluster: "prod-a"})
	require.NoError(t, err)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	t.Run("passes", func(t *testing.T) {
		tmp := t.TempDir()
		r := &restore.Restorer{Identities: []age.Identity{id}, TempDir: tmp}
		res, err := r.Drill(t.Context(), found)
		require.NoError(t, err)
		require.True(t, res.Passed())
		require.Equal(t, want, res.Status)
		require.Equal(t, m.Raw, res.Raw)
		require.Equal(t, m.Stored, res.Stored)
		require.True(t, res.ManifestChecked)
		require.Equal(t, m.ID, res.ID)
		require.Equal(t, "mem", res.Source)
		require.Equal(t, m.Created, res.Created)
		require.Positive(t, res.Duration)
		require.Empty(t, dirEntries(t, tmp), "the drill cleans up")
	})

	t.Run("fails without the key", func(t *testing.T) {
		tmp := t.TempDir()
		r := &restore.Restorer{TempDir: tmp}
		res, err := r.Drill(t.Context(), found)
		require.ErrorIs(t, err, restore.ErrDecrypt)
		require.False(t, res.Passed())
		require.ErrorIs(t, res.Err, restore.ErrDecrypt)
		require.False(t, res.Restored)
		require.Empty(t, dirEntries(t, tmp))
	})

	t.Run("job records every run", func(t *testing.T) {
		var got []*restore.DrillResult
		record := func(_ context.Context, res *restore.DrillResult) { got = append(got, res) }
		r := &restore.Restorer{Identities: []age.Identity{id}, TempDir: t.TempDir()}

		job := r.DrillJob(sources, restore.Query{Cluster: "prod-a"}, record)
		require.NoError(t, job(t.Context()))
		missing := r.DrillJob(sources, restore.Query{Cluster: "prod-z"}, record)
		require.ErrorIs(t, missing(t.Context()), restore.ErrNoBackup)

		require.Len(t, got, 2)
		require.True(t, got[0].Passed())
		require.Equal(t, want.Revision, got[0].Status.Revision)
		require.False(t, got[1].Passed())
		require.Equal(t, "prod-z", got[1].Cluster)
		require.ErrorIs(t, got[1].Err, restore.ErrNoBackup)
	})

	t.Run("a legacy snapshot", func(t *testing.T) {
		lb := memBucket(t)
		put(t, lb, "prod-a/etcd-snapshot.db", smallSnapshot(t))
		legacy, err := restore.Find(t.Context(), []restore.Source{{Name: "old", Catalog: lb}}, restore.Query{Cluster: "prod-a"})
		require.NoError(t, err)
		res, err := (&restore.Restorer{TempDir: t.TempDir()}).Drill(t.Context(), legacy)
		require.NoError(t, err)
		require.Equal(t, backup.KindLegacy, res.Kind)
		require.False(t, res.ManifestChecked)
		require.Equal(t, want, res.Status)
	})
}

func TestDrillLeavesNoDirectoryOnFailure(t *testing.T) {
	b := memBucket(t)
	// A valid trailer over bytes that are no database: the fetch passes,
	// etcd's restore fails.
	junk := make([]byte, 4096)
	put(t, b, "prod-a/junk.db", append(junk, sha256Of(junk)...))
	found, err := restore.Find(t.Context(), []restore.Source{{Name: "mem", Catalog: b}}, restore.Query{Cluster: "prod-a"})
	require.NoError(t, err)
	tmp := t.TempDir()
	res, err := (&restore.Restorer{TempDir: tmp}).Drill(t.Context(), found)
	require.Error(t, err)
	require.False(t, res.Passed())
	require.Empty(t, dirEntries(t, filepath.Clean(tmp)))
}
