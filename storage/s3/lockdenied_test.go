package s3_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// denyPolicy is an IAM policy that allows every S3 action but those named.
func denyPolicy(actions ...string) string {
	deny := ""
	for i, a := range actions {
		if i > 0 {
			deny += ","
		}
		deny += fmt.Sprintf("%q", "s3:"+a)
	}
	return fmt.Sprintf(`{"Version":"2012-10-17","Statement":[`+
		`{"Effect":"Allow","Action":["s3:*"],"Resource":["arn:aws:s3:::*"]},`+
		`{"Effect":"Deny","Action":[%s],"Resource":["arn:aws:s3:::*"]}]}`, deny)
}

// TestDeleteWhenTheLockConfigurationIsDenied: a key that may not read the
// bucket's object lock configuration (s3:GetBucketObjectLockConfiguration
// denied) still never sees a locked or legally held object "deleted"
// behind a delete marker. Delete asks the object instead; when that is
// refused too, Delete refuses rather than guess.
func TestDeleteWhenTheLockConfigurationIsDenied(t *testing.T) {
	srv := miniotest.Start(t)
	ctx := testCtx(t)
	until := time.Now().Add(time.Hour).Truncate(time.Second).UTC()
	restricted := func(policy string) func(*s3.Options) {
		access, secret, token := srv.RestrictedCredentials(t, policy)
		return func(o *s3.Options) { o.Credentials = s3.StaticCredentials(access, secret, token) }
	}
	noConfig := restricted(denyPolicy("GetBucketObjectLockConfiguration"))

	t.Run("retention", func(t *testing.T) {
		b, name := newBucket(t, srv, true, noConfig)
		require.NoError(t, b.Put(ctx, "k", stream(1, 10), nil))
		require.NoError(t, b.SetRetention(ctx, "k", storage.Retention{Mode: storage.Governance, Until: until}))
		require.ErrorIs(t, b.Delete(ctx, "k"), storage.ErrLocked)
		requireContent(t, b, "k", 1, 10)
		require.Len(t, listVersions(t, b.Client(), name, "k"), 1, "no delete marker")
	})

	t.Run("legal hold", func(t *testing.T) {
		b, name := newBucket(t, srv, true, noConfig)
		require.NoError(t, b.Put(ctx, "k", stream(1, 10), nil))
		on := minio.LegalHoldEnabled
		require.NoError(t, srv.Client(t).PutObjectLegalHold(ctx, name, "k", minio.PutObjectLegalHoldOptions{Status: &on}))
		require.ErrorIs(t, b.Delete(ctx, "k"), storage.ErrLocked)
		requireContent(t, b, "k", 1, 10)
		require.Len(t, listVersions(t, b.Client(), name, "k"), 1, "no delete marker")
	})

	t.Run("an unlocked object goes with every version", func(t *testing.T) {
		b, name := newBucket(t, srv, true, noConfig)
		require.NoError(t, b.Put(ctx, "k", stream(1, 10), nil))
		require.NoError(t, b.Put(ctx, "k", stream(2, 10), nil))
		require.NoError(t, b.Delete(ctx, "k"))
		requireAbsent(t, b, "k")
		assert.Empty(t, listVersions(t, b.Client(), name, "k"))
		require.NoError(t, b.Delete(ctx, "k"), "deleting a missing key")
	})

	// A key behind a delete marker (another client's plain DELETE, a
	// lifecycle rule) keeps its older versions: Delete removes them, or
	// meets their lock, as it does with the configuration readable, and
	// never reports a locked version deleted.
	t.Run("a key behind a delete marker", func(t *testing.T) {
		b, name := newBucket(t, srv, true, noConfig)
		require.NoError(t, b.Put(ctx, "k", stream(1, 10), nil))
		require.NoError(t, srv.Client(t).RemoveObject(ctx, name, "k", minio.RemoveObjectOptions{}))
		require.NoError(t, b.Delete(ctx, "k"), "deleting a missing key")
		assert.Empty(t, listVersions(t, b.Client(), name, "k"))
		require.NoError(t, b.Delete(ctx, "never-written"))
	})

	t.Run("a locked version behind a delete marker", func(t *testing.T) {
		b, name := newBucket(t, srv, true, noConfig)
		require.NoError(t, b.Put(ctx, "k", stream(1, 10), nil))
		require.NoError(t, b.SetRetention(ctx, "k", storage.Retention{Mode: storage.Governance, Until: until}))
		require.NoError(t, srv.Client(t).RemoveObject(ctx, name, "k", minio.RemoveObjectOptions{}))
		require.ErrorIs(t, b.Delete(ctx, "k"), storage.ErrLocked)
		versions := listVersions(t, b.Client(), name, "k")
		require.Len(t, versions, 2, "the locked version and the marker stay")
	})

	// MinIO lists versions with s3:ListBucket; Amazon S3 asks s3:ListBucketVersions.
	t.Run("versions behind a delete marker not listable: refused", func(t *testing.T) {
		b, name := newBucket(t, srv, true, restricted(denyPolicy("GetBucketObjectLockConfiguration", "ListBucketVersions", "ListBucket")))
		require.NoError(t, b.Put(ctx, "k", stream(1, 10), nil))
		require.NoError(t, b.SetRetention(ctx, "k", storage.Retention{Mode: storage.Governance, Until: until}))
		require.NoError(t, srv.Client(t).RemoveObject(ctx, name, "k", minio.RemoveObjectOptions{}))
		err := b.Delete(ctx, "k")
		require.ErrorIs(t, err, storage.ErrPermission)
		require.ErrorIs(t, err, s3.ErrLockUnknown)
		require.Len(t, listVersions(t, srv.Client(t), name, "k"), 2)
	})

	t.Run("a bucket without object lock", func(t *testing.T) {
		b, _ := newBucket(t, srv, false, noConfig)
		require.NoError(t, b.Put(ctx, "k", stream(1, 10), nil))
		require.NoError(t, b.Delete(ctx, "k"))
		requireAbsent(t, b, "k")
	})

	t.Run("nothing readable: refused", func(t *testing.T) {
		b, name := newBucket(t, srv, true, restricted(denyPolicy(
			"GetBucketObjectLockConfiguration", "GetObjectRetention", "GetObjectLegalHold")))
		require.NoError(t, b.Put(ctx, "k", stream(1, 10), nil))
		on := minio.LegalHoldEnabled
		require.NoError(t, srv.Client(t).PutObjectLegalHold(ctx, name, "k", minio.PutObjectLegalHoldOptions{Status: &on}))
		err := b.Delete(ctx, "k")
		require.ErrorIs(t, err, storage.ErrPermission)
		require.ErrorIs(t, err, s3.ErrLockUnknown)
		requireContent(t, b, "k", 1, 10)
		require.Len(t, listVersions(t, b.Client(), name, "k"), 1, "no delete marker")
	})
}
