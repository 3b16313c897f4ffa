package backuptest_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/backup/backuptest"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage"
)

// backUp runs one backup of snap to the destination "dest".
func backUp(t *testing.T, dests *backuptest.Destinations, snap backup.Snapshotter) error {
	t.Helper()
	up, err := dests.Uploader(t.Context(), "dest")
	require.NoError(t, err)
	p := &backup.Pipeline{Snapshotter: snap}
	_, err = p.Run(t.Context(), backup.Request{Cluster: "prod-a", Name: "once", Targets: []backup.Target{{Destination: "dest", Uploader: up}}})
	return err
}

// A keys snapshot is an etcd database: the library reads its keys back
// offline, at its revision.
func TestKeysSnapshotReadsBack(t *testing.T) {
	stream, rev, err := backuptest.KeysSnapshot(map[string]string{"/a/1": "one", "/a/2": "two", "/b": "other"})
	require.NoError(t, err)
	require.EqualValues(t, 4, rev)
	dests := backuptest.NewDestinations("dest")
	t.Cleanup(func() { _ = dests.Close() })
	require.NoError(t, backUp(t, dests, backuptest.NewSnapshotter(stream, rev)))

	backups, err := backuptest.Backups(t.Context(), dests.Bucket("dest"), "prod-a")
	require.NoError(t, err)
	require.Len(t, backups, 1)
	require.EqualValues(t, rev, backups[0].Manifest.Etcd.Revision.Low)
	b, err := restore.Find(t.Context(), []restore.Source{{Name: "dest", Catalog: dests.Bucket("dest")}}, restore.Query{Cluster: "prod-a"})
	require.NoError(t, err)
	var out bytes.Buffer
	h, n, err := (&restore.Restorer{TempDir: t.TempDir()}).SnapshotKeys(t.Context(), b, []string{"/a/"}, &out)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.Equal(t, rev, h.Revision)
	kr, err := backup.NewKeysJSONReader(&out)
	require.NoError(t, err)
	for _, want := range [][2]string{{"/a/1", "one"}, {"/a/2", "two"}} {
		kv, err := kr.Next()
		require.NoError(t, err)
		require.Equal(t, want, [2]string{string(kv.Key), string(kv.Value)})
	}
	_, err = kr.Next()
	require.Equal(t, io.EOF, err)
}

// A snapshotter told to fail does so at its offset with its error, and
// the run stores nothing.
func TestSnapshotterFailsOnDemand(t *testing.T) {
	stream := backuptest.Stream(64, 1)
	boom := errors.New("connection reset")
	for _, at := range []int64{0, 1000, int64(len(stream)) - 1} {
		snap := backuptest.NewSnapshotter(stream, 7)
		snap.Err, snap.FailAt = boom, at
		s, err := snap.Snapshot(t.Context())
		require.NoError(t, err)
		n, err := io.Copy(io.Discard, s)
		require.ErrorIs(t, err, boom)
		require.Equal(t, at, n)

		dests := backuptest.NewDestinations("dest")
		require.ErrorIs(t, backUp(t, dests, snap), boom)
		backups, err := backuptest.Backups(t.Context(), dests.Bucket("dest"), "prod-a")
		require.NoError(t, err)
		require.Empty(t, backups)
		require.Equal(t, 2, snap.Calls())
		_ = dests.Close()
	}
	snap := backuptest.NewSnapshotter(stream, 7)
	snap.OpenErr = boom
	_, err := snap.Snapshot(t.Context())
	require.ErrorIs(t, err, boom)
}

// Backups notices a data object that is not what its manifest says, and
// an unknown destination is storage.ErrNotFound.
func TestBackupsChecksWhatIsStored(t *testing.T) {
	dests := backuptest.NewDestinations("dest")
	t.Cleanup(func() { _ = dests.Close() })
	require.NoError(t, backUp(t, dests, backuptest.NewSnapshotter(backuptest.Stream(8, 2), 7)))
	backups, err := backuptest.Backups(t.Context(), dests.Bucket("dest"), "prod-a")
	require.NoError(t, err)
	require.Len(t, backups, 1)

	b := dests.Bucket("dest")
	require.NoError(t, b.Put(context.Background(), backups[0].Key, bytes.NewReader([]byte("not the backup")), nil))
	_, err = backuptest.Backups(t.Context(), b, "prod-a")
	require.ErrorContains(t, err, "its manifest says")

	_, err = dests.Store(t.Context(), "other")
	require.ErrorIs(t, err, storage.ErrNotFound)
	require.Nil(t, dests.Bucket("other"))
}
