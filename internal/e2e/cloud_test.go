package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/azuritetest"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/gcstest"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/azure"
	"github.com/etcdbackup/etcdbackup/storage/blob/gcs"
)

// TestCloudDestinations backs one etcd up to a gs:// and an azblob://
// destination of one registry, as a host configures them (the emulators
// named by the environment the cloud SDKs read), and restores each copy
// into a member that serves every key. The cloud drivers read the
// environment once per process, on their first URL: no other test in this
// package opens gs:// or azblob:// URLs.
func TestCloudDestinations(t *testing.T) {
	ctx := t.Context()
	gcsSrv, azureSrv := gcstest.Start(t), azuritetest.Start(t)
	bucket := gcsSrv.NewBucket(t)
	container := azureSrv.NewContainer(t).URL()
	container = container[strings.LastIndex(container, "/")+1:]
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimSuffix(strings.TrimPrefix(gcsSrv.Endpoint(), "http://"), "/storage/v1/"))
	t.Setenv("AZURE_STORAGE_ACCOUNT", azuritetest.Account)
	t.Setenv("AZURE_STORAGE_KEY", azuritetest.Key)

	src := etcdtest.Start(t)
	cli := src.Client(t)
	fill, err := etcdtest.Fill(ctx, cli, etcdtest.FillOptions{Keys: 1000, Seed: 7})
	require.NoError(t, err)

	registry, err := destination.NewRegistry(destination.Options{Drivers: []blob.Driver{gcs.Driver(), azure.Driver()}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, registry.Close()) })
	specs := []destination.Spec{
		{Name: "gcs", URL: "gs://" + bucket + "/seed-eu"},
		{Name: "azure", URL: fmt.Sprintf("azblob://%s/seed-eu?account=%s&endpoint=%s&insecure=true", container, azuritetest.Account, azureSrv.Endpoint())},
	}
	var targets []backup.Target
	for _, spec := range specs {
		d, err := registry.Add(ctx, spec)
		require.NoError(t, err, spec.Name)
		st, err := registry.Check(ctx, spec.Name)
		require.NoError(t, err, spec.Name)
		require.True(t, st.Available(), "%s: %+v", spec.Name, st)
		targets = append(targets, d.Target())
	}

	identity, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: src.Endpoints()})
	require.NoError(t, err)
	pipeline := &backup.Pipeline{
		Snapshotter: snapshotter,
		Compression: backup.Zstd,
		Encryption:  backup.Encryption{Recipients: []string{identity.Recipient().String()}},
	}
	res, err := pipeline.Run(ctx, backup.Request{Cluster: "prod-a", Name: "manual", Targets: targets})
	require.NoError(t, err)
	require.Len(t, res.Outcomes, 2)
	for _, o := range res.Outcomes {
		require.NoError(t, o.Err)
	}

	restorer := &restore.Restorer{Identities: []age.Identity{identity}}
	for _, spec := range specs {
		t.Run(spec.Name, func(t *testing.T) {
			d, err := registry.Get(spec.Name)
			require.NoError(t, err)
			found, err := restore.Find(ctx, []restore.Source{{Name: d.Name(), Catalog: d}}, restore.Query{Cluster: "prod-a"})
			require.NoError(t, err)
			assert.Equal(t, res.ID, found.ID)
			assert.Equal(t, backup.KindBackup, found.Kind)

			dir := filepath.Join(t.TempDir(), "restored")
			_, err = restorer.Restore(ctx, found, restore.Member{Name: "restored", DataDir: dir, PeerURLs: []string{"http://127.0.0.1:2380"}})
			require.NoError(t, err)
			restored := etcdtest.Start(t, etcdtest.WithDataDir(dir), etcdtest.WithName("restored"))
			got, err := restored.Client(t).Get(ctx, "/registry", clientv3.WithPrefix(), clientv3.WithCountOnly())
			require.NoError(t, err)
			assert.EqualValues(t, 1000, got.Count)
			assert.Equal(t, fill.Revision, got.Header.Revision)
			for _, i := range []int{0, 499, 999} {
				key := etcdtest.FillKey("", i)
				want, err := cli.Get(ctx, key)
				require.NoError(t, err)
				have, err := restored.Client(t).Get(ctx, key)
				require.NoError(t, err)
				require.Len(t, have.Kvs, 1, key)
				assert.Equal(t, want.Kvs[0].Value, have.Kvs[0].Value, key)
			}
		})
	}
}
