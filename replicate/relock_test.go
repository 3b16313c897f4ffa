package replicate_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/replicate"
	"github.com/etcdbackup/etcdbackup/storage"
)

// Every rerun of a copy re-locks, for another RetainFor, each backup the
// target holds whose lock expired: a backup written once with a 24h lock is
// kept locked for as long as the source lists it, and the target's own
// retention can never delete it.
func TestCopyRerunKeepsLocksOfSkipped(t *testing.T) {
	ctx := t.Context()
	srv := miniotest.Start(t)
	now := time.Now().UTC().Truncate(time.Second)
	reg, err := destination.NewRegistry(destination.Options{
		Secrets: destination.StaticSecrets{"minio": {AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey()}},
		Now:     func() time.Time { return now },
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close() })
	creds := destination.Credentials{Source: destination.SourceSecret, Secret: "minio"}
	src, err := reg.Add(ctx, destination.Spec{Name: "primary", Credentials: creds,
		URL: fmt.Sprintf("s3://%s?endpoint=%s&insecure=true&region=us-east-1", srv.NewBucket(t, miniotest.BucketOptions{}), srv.Endpoint())})
	require.NoError(t, err)
	vault, err := reg.Add(ctx, destination.Spec{Name: "vault", Credentials: creds,
		URL:        fmt.Sprintf("s3://%s?endpoint=%s&insecure=true&region=us-east-1", srv.NewBucket(t, miniotest.BucketOptions{ObjectLocking: true}), srv.Endpoint()),
		ObjectLock: destination.ObjectLock{Mode: storage.Governance, RetainFor: 24 * time.Hour},
	})
	require.NoError(t, err)
	m := commit(t, src, "primary", 0)
	clock := now
	c := &replicate.Copier{Source: src, SourceName: "primary", Target: replicate.DestinationTarget(vault), Now: func() time.Time { return clock }}
	_, err = c.Copy(ctx, "prod", replicate.Selection{All: true})
	require.NoError(t, err)
	key := "prod/" + m.DataKey
	r1, err := vault.Retention(ctx, key)
	require.NoError(t, err)
	for day := 1; day <= 3; day++ {
		clock = now.Add(time.Duration(day)*24*time.Hour + time.Hour)
		rep, err := c.Copy(ctx, "prod", replicate.Selection{All: true})
		require.NoError(t, err)
		r, err := vault.Retention(ctx, key)
		require.NoError(t, err)
		t.Logf("day %d: outcome %s, lock until %s (first lock until %s)", day, rep.Items[0].Outcome, r.Until, r1.Until)
	}
	r, _ := vault.Retention(ctx, key)
	if r.Until.After(r1.Until.Add(time.Hour)) {
		t.Errorf("a skipped backup's lock was extended by each rerun: until %s, written with %s", r.Until, r1.Until)
	}
	_ = backup.ManifestKey
}
