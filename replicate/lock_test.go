package replicate_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/replicate"
	"github.com/etcdbackup/etcdbackup/storage"
)

// TestCopyLocksOnTheTarget copies to a MinIO destination with object lock
// from one without: every object copied is locked as the target asks,
// also the data object a copy stored before it was stopped and that the
// rerun commits.
func TestCopyLocksOnTheTarget(t *testing.T) {
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

	var ms []*backup.Manifest
	for i := range 2 {
		ms = append(ms, commit(t, src, "primary", i))
	}
	// A copy stopped after storing the second backup's data object, before
	// locking it: the bucket holds it unlocked.
	m := *ms[1]
	m.Destination = "vault"
	rc, err := src.Get(ctx, "prod/"+m.DataKey)
	require.NoError(t, err)
	require.NoError(t, (&backup.BucketUploader{Bucket: vault}).Upload(ctx, &m, rc))
	rc.Close()

	c := &replicate.Copier{Source: src, SourceName: "primary", Target: replicate.DestinationTarget(vault), Now: func() time.Time { return now }}
	rep, err := c.Copy(ctx, "prod", replicate.Selection{All: true})
	require.NoError(t, err)
	require.Equal(t, []replicate.Outcome{replicate.Copied, replicate.Resumed}, []replicate.Outcome{rep.Items[0].Outcome, rep.Items[1].Outcome})
	for _, m := range ms {
		for _, key := range []string{"prod/" + m.DataKey, "prod/" + backup.ManifestKey(m.DataKey)} {
			ret, err := vault.Retention(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, storage.Governance, ret.Mode, key)
			assert.WithinDuration(t, now.Add(24*time.Hour), ret.Until, time.Second, key)
		}
	}
	entries, err := backup.ListBackups(ctx, vault, "prod")
	require.NoError(t, err)
	require.Len(t, entries, 2)
	for _, e := range entries {
		assert.Equal(t, backup.KindBackup, e.Kind)
		assert.Equal(t, "vault", e.Manifest.Destination)
	}
}

// commit stores a backup of opaque bytes on u, as the pipeline would.
func commit(t *testing.T, u interface {
	backup.Uploader
}, dest string, i int) *backup.Manifest {
	t.Helper()
	data := bytes.Repeat(fmt.Appendf(nil, "backup %d ", i), 300)
	sum := sha256.Sum256(data)
	created := time.Date(2026, 11, 22, 2, i, 0, 0, time.UTC)
	m := backup.Manifest{Format: backup.ManifestFormat, Cluster: "prod", Name: "nightly", Destination: dest,
		Created: created, Completed: created.Add(time.Second), Compression: backup.None, Run: "0123abcd",
		Stored: backup.Digest{Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])},
		Etcd:   backup.EtcdInfo{Revision: backup.RevisionInfo{Low: int64(10 + i), High: int64(10 + i)}}}
	m.Raw = m.Stored
	m.ID = backup.BackupID("prod", "nightly", created, true)
	m.DataKey = backup.DataKey(m.ID, created, backup.None, false)
	ctx := context.Background()
	require.NoError(t, u.Upload(ctx, &m, bytes.NewReader(data)))
	require.NoError(t, u.Commit(ctx, &m))
	return &m
}
