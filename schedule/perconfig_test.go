package schedule

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// TestKeepPerBackupConfig: two configs of one cluster on one destination,
// an hourly one keeping 5 and a daily one keeping 1, each keep their own
// count on a real etcd and MinIO. Before retention planned per config they
// pruned each other down to "hourly: 2, daily: 1".
func TestKeepPerBackupConfig(t *testing.T) {
	ctx := t.Context()
	etcd := etcdtest.Start(t)
	_, err := etcd.Client(t).Put(ctx, "/registry/k", "v")
	require.NoError(t, err)
	srv := miniotest.Start(t)
	b, err := s3.New(srv.S3Options(srv.NewBucket(t, miniotest.BucketOptions{})))
	require.NoError(t, err)
	dests := memDestinations{"minio": b}
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	now := utc("2026-01-01T00:00:00Z")
	r := dests.runner(snapshotter, func() time.Time { return now })

	hourly := Job{ID: "ns/hourly", Schedule: "@hourly", Cluster: "prod-a", Name: "hourly", Destinations: []string{"minio"}, Retention: retention.KeepLast(5)}
	daily := Job{ID: "ns/daily", Schedule: "@daily", Cluster: "prod-a", Name: "daily", Destinations: []string{"minio"}, Retention: retention.KeepLast(1)}
	for hour := range 8 {
		now = utc("2026-01-01T00:00:00Z").Add(time.Duration(hour) * time.Hour)
		require.NoError(t, r.Backup(ctx, hourly, now))
		require.NoError(t, r.Prune(ctx, hourly))
		if hour%3 == 0 {
			require.NoError(t, r.Backup(ctx, daily, now))
			require.NoError(t, r.Prune(ctx, daily))
		}
	}
	counts := countByName(t, b, "prod-a")
	require.Equal(t, map[string]int{"hourly": 5, "daily": 1}, counts)
}

func countByName(t *testing.T, b storage.Bucket, cluster string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, e := range backupsOf(t, b, cluster) {
		out[e.Manifest.Name]++
	}
	return out
}
