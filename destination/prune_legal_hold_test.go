package destination_test

import (
	"fmt"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/retention"
)

// An operator puts a legal hold on a backup's data object (the
// thing worth holding). The pruner's pre-check reads retention only, not
// legal hold; it deletes the manifest first, which on an object-lock bucket
// now removes every version of it for good; the data delete then meets
// the hold. The held backup is left without its manifest, permanently:
// before, the manifest's version stayed behind a delete marker.
func TestPruneLegalHeldDataKeepsManifest(t *testing.T) {
	srv := miniotest.Start(t)
	ctx := testCtx(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{ObjectLocking: true})
	r := newRegistry(t, destination.Options{
		Secrets: destination.StaticSecrets{"minio": {AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey()}},
	})
	creds := destination.Credentials{Source: destination.SourceSecret, Secret: "minio"}
	d, err := r.Add(ctx, destination.Spec{Name: "held", Credentials: creds,
		URL: fmt.Sprintf("s3://%s/held?endpoint=%s&insecure=true&region=us-east-1", bucket, srv.Endpoint())})
	require.NoError(t, err)
	res := runBackup(t, ctx, "prod-a", "nightly", 1, d.Target())
	m := res.Outcomes[0].Manifest
	dataKey := "held/" + backup.ClusterPrefix("prod-a") + m.DataKey
	manifestKey := "held/" + backup.ClusterPrefix("prod-a") + backup.ManifestKey(m.DataKey)
	on := minio.LegalHoldEnabled
	require.NoError(t, srv.Client(t).PutObjectLegalHold(ctx, bucket, dataKey, minio.PutObjectLegalHoldOptions{Status: &on}))

	p := &retention.Pruner{Store: d, Destination: "held"}
	item, err := p.Delete(ctx, "prod-a", m.ID)
	t.Logf("prune: outcome=%s reason=%q err=%v", item.Outcome, item.Reason, err)
	n := 0
	for obj := range srv.Client(t).ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: manifestKey, WithVersions: true}) {
		require.NoError(t, obj.Err)
		n++
	}
	require.NotZero(t, n, "the held backup's manifest is gone, every version of it")
	require.Equal(t, retention.Skipped, item.Outcome)
	require.Equal(t, retention.SkipLocked, item.Skip)
	require.Contains(t, item.Reason, "legal hold")
	entries, err := backup.ListBackups(ctx, d, "prod-a")
	require.NoError(t, err)
	require.Len(t, entries, 1, "the held backup is still listed")
	require.Equal(t, m.ID, entries[0].ID)

	// Once the hold is lifted the backup goes, manifest and data.
	off := minio.LegalHoldDisabled
	require.NoError(t, srv.Client(t).PutObjectLegalHold(ctx, bucket, dataKey, minio.PutObjectLegalHoldOptions{Status: &off}))
	item, err = p.Delete(ctx, "prod-a", m.ID)
	require.NoError(t, err)
	require.Equal(t, retention.Deleted, item.Outcome)
}
