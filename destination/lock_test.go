package destination_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage"
)

// TestDeleteSeesLocksWithMinIO: on a MinIO bucket with object lock, a
// delete through a destination meets the lock of the object, whether a
// retention date or a legal hold, and fails with storage.ErrLocked; the
// backup stays stored, listed and in the inventory. An object without a
// lock is deleted for good, every version of it.
func TestDeleteSeesLocksWithMinIO(t *testing.T) {
	srv := miniotest.Start(t)
	ctx := testCtx(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{ObjectLocking: true})
	r := newRegistry(t, destination.Options{
		Secrets: destination.StaticSecrets{"minio": {AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey()}},
	})
	creds := destination.Credentials{Source: destination.SourceSecret, Secret: "minio"}
	url := func(prefix string) string {
		return fmt.Sprintf("s3://%s/%s?endpoint=%s&insecure=true&region=us-east-1", bucket, prefix, srv.Endpoint())
	}
	locked, err := r.Add(ctx, destination.Spec{Name: "locked", Credentials: creds, URL: url("locked"),
		ObjectLock: destination.ObjectLock{Mode: storage.Governance, RetainFor: 24 * time.Hour}})
	require.NoError(t, err)
	held, err := r.Add(ctx, destination.Spec{Name: "held", Credentials: creds, URL: url("held")})
	require.NoError(t, err)

	res := runBackup(t, ctx, "prod-a", "nightly", 1, locked.Target())
	m := res.Outcomes[0].Manifest
	lockedKey := backup.ClusterPrefix("prod-a") + m.DataKey

	res = runBackup(t, ctx, "prod-a", "nightly", 2, held.Target())
	hm := res.Outcomes[0].Manifest
	heldKey := backup.ClusterPrefix("prod-a") + hm.DataKey
	on := minio.LegalHoldEnabled
	require.NoError(t, srv.Client(t).PutObjectLegalHold(ctx, bucket, "held/"+heldKey, minio.PutObjectLegalHoldOptions{Status: &on}))

	for _, tc := range []struct {
		d   *destination.Destination
		key string
		id  string
	}{{locked, lockedKey, m.ID}, {held, heldKey, hm.ID}} {
		_, err := r.Sync(ctx, tc.d.Name())
		require.NoError(t, err)
		err = tc.d.Delete(ctx, tc.key)
		require.ErrorIs(t, err, storage.ErrLocked, tc.d.Name())
		_, err = tc.d.Stat(ctx, tc.key)
		require.NoError(t, err, "%s: the locked object is still there", tc.d.Name())
		require.True(t, slices.ContainsFunc(tc.d.Inventory().Entries, func(e destination.Entry) bool { return e.ID == tc.id }),
			"%s: the inventory still shows the backup", tc.d.Name())
	}

	// Without a lock, a delete leaves no version behind.
	plain := "held/prod-a/notes.txt"
	require.NoError(t, held.Put(ctx, "prod-a/notes.txt", strings.NewReader("x"), nil))
	require.NoError(t, held.Delete(ctx, "prod-a/notes.txt"))
	for obj := range srv.Client(t).ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: plain, WithVersions: true}) {
		t.Errorf("version left behind: %s %s %v", obj.Key, obj.VersionID, obj.Err)
	}
}
