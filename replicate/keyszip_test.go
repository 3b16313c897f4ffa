package replicate_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/backup/backuptest"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/replicate"
)

// A keys zip export is a backup like any other: the test kit lists it and
// replication copies it, selected by All or by its ID.
func TestCopyKeysZipBackups(t *testing.T) {
	ctx := t.Context()
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	_, err := cli.Put(ctx, "/a/1", "x")
	require.NoError(t, err)

	dests := backuptest.NewDestinations("src", "dst", "dst2")
	defer dests.Close()
	up, err := dests.Uploader(ctx, "src")
	require.NoError(t, err)
	p := &backup.Pipeline{Snapshotter: &backup.KeysExporter{Client: cli, Kind: backup.ManifestKindKeys}}
	res, err := p.Run(ctx, backup.Request{Cluster: "prod-a", Name: "export", Kind: backup.ManifestKindKeys,
		Targets: []backup.Target{{Destination: "src", Uploader: up}}})
	require.NoError(t, err)
	require.NoError(t, res.Outcomes[0].Err)

	listed, err := backuptest.Backups(ctx, dests.Bucket("src"), "prod-a")
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, backup.KindKeys, listed[0].Kind)

	c := &replicate.Copier{Source: dests.Bucket("src"), Target: replicate.Target{Name: "dst", Bucket: dests.Bucket("dst")}}
	rep, err := c.Copy(ctx, "prod-a", replicate.Selection{All: true})
	require.NoError(t, err)
	require.Len(t, rep.Items, 1)
	copied, err := backuptest.Backups(ctx, dests.Bucket("dst"), "prod-a")
	require.NoError(t, err)
	require.Len(t, copied, 1)
	require.Equal(t, res.ID, copied[0].ID)

	c = &replicate.Copier{Source: dests.Bucket("src"), Target: replicate.Target{Name: "dst2", Bucket: dests.Bucket("dst2")}}
	_, err = c.Copy(ctx, "prod-a", replicate.Selection{IDs: []string{res.ID}})
	require.NoError(t, err)
	copied, err = backuptest.Backups(ctx, dests.Bucket("dst2"), "prod-a")
	require.NoError(t, err)
	require.Len(t, copied, 1)
}
