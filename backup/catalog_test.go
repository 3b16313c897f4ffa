package backup_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
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
