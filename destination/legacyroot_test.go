package destination_test

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/retention"
)

func TestLegacyNamesAttribute(t *testing.T) {
	names := backup.LegacyNames{"prod": {"daily", "a-weekly"}, "prod-a": {"daily", "weekly"}, "prod-b": {"daily", "daily-eu"}}
	for name, want := range map[string]string{
		"prod-daily-2021-01-01T00:00:00":   "prod",
		"prod-a-daily-2021-01-01T00:00:00": "prod-a",
		"prod-a-daily":                     "prod-a",
		"prod-a-daily.db.gz":               "prod-a",
		"prod-b-daily-eu-2021":             "prod-b", // two configs of one cluster: fine
		"prod-a-weekly-2021":               "",       // prod's "a-weekly" or prod-a's "weekly": ambiguous
		"prod-a-dailyx":                    "",
		"prod-c-daily":                     "",
		"snapshot.db":                      "",
	} {
		cluster, how, ok := names.Attribute(name)
		require.Equal(t, want, cluster, name)
		require.Equal(t, want != "", ok, name)
		if ok {
			require.Contains(t, how, fmt.Sprintf("cluster %q", want))
		}
	}
}

// TestLegacyRootBackups: backups of the single-bucket world at the top of
// a MinIO bucket are found by restore and inventory, attributed to their
// cluster by what the host knows, restorable, and left alone by retention.
func TestLegacyRootBackups(t *testing.T) {
	ctx := testCtx(t)
	etcd := etcdtest.Start(t)
	c := etcd.Client(t)
	_, err := c.Put(ctx, "/registry/old", "v")
	require.NoError(t, err)
	rc, err := c.Snapshot(ctx)
	require.NoError(t, err)
	snapshot, err := io.ReadAll(rc)
	require.NoError(t, err)

	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	names := backup.LegacyNames{"prod": {"daily"}, "prod-a": {"daily"}}
	r := newRegistry(t, destination.Options{
		Secrets:     destination.StaticSecrets{"minio": {AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey()}},
		LegacyNames: func() backup.LegacyNames { return names },
	})
	d, err := r.Add(ctx, destination.Spec{Name: "default", Endpoint: "http://" + srv.Endpoint(), Bucket: bucket,
		Credentials: destination.Credentials{Source: destination.SourceSecret, Secret: "minio"}})
	require.NoError(t, err)
	for _, key := range []string{"prod-a-daily-2021-01-01T00:00:00", "prod-daily-2021-01-01T00:00:00", "unrelated.db"} {
		require.NoError(t, d.Put(ctx, key, bytes.NewReader(snapshot), nil))
	}
	snap, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	for range 2 {
		_, err = (&backup.Pipeline{Snapshotter: snap}).Run(ctx, backup.Request{Cluster: "prod-a", Name: "daily", Scheduled: true, Targets: []backup.Target{d.Target()}})
		require.NoError(t, err)
	}

	// Restore finds it, for its cluster only, and it restores.
	src := []restore.Source{{Name: "default", Catalog: d, Legacy: names}}
	b, err := restore.Find(ctx, src, restore.Query{Cluster: "prod-a", ID: "prod-a-daily-2021-01-01T00:00:00"})
	require.NoError(t, err)
	require.Equal(t, backup.KindLegacy, b.Kind)
	require.Contains(t, b.Attribution, `config "daily" of cluster "prod-a"`)
	drill, err := (&restore.Restorer{TempDir: t.TempDir()}).Drill(ctx, b)
	require.NoError(t, err)
	require.True(t, drill.Passed())
	all, err := restore.List(ctx, src, "prod")
	require.NoError(t, err)
	require.Len(t, all, 1, "prod's own legacy object, and nothing of prod-a")
	require.Equal(t, "prod-daily-2021-01-01T00:00:00", all[0].ID)

	// The inventory shows them, attributed.
	inv, err := r.Sync(ctx, "default")
	require.NoError(t, err)
	var attributed []string
	for _, e := range inv.Entries {
		if e.Attribution != "" {
			attributed = append(attributed, e.Cluster+" "+e.Key)
		}
	}
	require.ElementsMatch(t, []string{"prod-a prod-a-daily-2021-01-01T00:00:00", "prod prod-daily-2021-01-01T00:00:00"}, attributed)

	// Retention never deletes them.
	report, err := (&retention.Pruner{Store: d, Destination: "default", Policy: retention.KeepLast(1)}).Prune(ctx, "prod-a")
	require.NoError(t, err)
	require.Equal(t, 1, report.Count(retention.Deleted))
	for _, key := range []string{"prod-a-daily-2021-01-01T00:00:00", "prod-daily-2021-01-01T00:00:00", "unrelated.db"} {
		_, err := d.Stat(ctx, key)
		require.NoError(t, err, key)
	}
	require.False(t, strings.Contains(fmt.Sprint(inv.Entries), srv.SecretKey()))
}
