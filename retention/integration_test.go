package retention_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// streamSnapshotter serves small valid snapshot streams.
type streamSnapshotter struct{ seed uint64 }

func (s *streamSnapshotter) Snapshot(ctx context.Context) (*backup.Snapshot, error) {
	s.seed++
	rng := rand.New(rand.NewPCG(s.seed, 1))
	body := make([]byte, 64*512)
	for i := range body {
		body[i] = byte(rng.Uint32())
	}
	sum := sha256.Sum256(body)
	stream := append(body, sum[:]...)
	return backup.NewSnapshot(io.NopCloser(bytes.NewReader(stream)), backup.SnapshotInfo{RevisionLow: 1}, nil), nil
}

func newBucket(t *testing.T, srv *miniotest.Server, locking bool) *s3.Bucket {
	t.Helper()
	opts := srv.S3Options(srv.NewBucket(t, miniotest.BucketOptions{ObjectLocking: locking}))
	opts.DeleteAllVersions = locking
	b, err := s3.New(opts)
	require.NoError(t, err)
	return b
}

// backups writes n scheduled backups of cluster, an hour apart, ending an
// hour before the time of day (the store dates them now: older dates would
// be dates the store contradicts).
func backups(t *testing.T, b storage.Bucket, cluster string, n int) []*backup.Manifest {
	t.Helper()
	var out []*backup.Manifest
	for i := range n {
		created := time.Now().Add(-time.Duration(n-i) * time.Hour)
		p := &backup.Pipeline{Snapshotter: &streamSnapshotter{seed: uint64(i) + uint64(len(cluster))*100}, Now: func() time.Time { return created }}
		res, err := p.Run(t.Context(), backup.Request{Cluster: cluster, Name: "hourly", Scheduled: true,
			Targets: []backup.Target{{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: b}}}})
		require.NoError(t, err)
		out = append(out, res.Outcomes[0].Manifest)
	}
	return out
}

func keysUnder(t *testing.T, b storage.Bucket, prefix string) []string {
	t.Helper()
	var out []string
	for info, err := range b.List(t.Context(), prefix) {
		require.NoError(t, err)
		out = append(out, info.Key)
	}
	return out
}

func TestPruneOnMinIO(t *testing.T) {
	srv := miniotest.Start(t)
	b := newBucket(t, srv, false)
	a := backups(t, b, "prod-a", 5)
	backups(t, b, "prod-ab", 4)
	require.NoError(t, b.Put(t.Context(), "prod-a/snapshot.db", bytes.NewReader([]byte("a legacy etcdctl snapshot")), nil))
	prodAB := keysUnder(t, b, "prod-ab/")
	require.Len(t, prodAB, 8)

	// A dry run plans and deletes nothing.
	dry := &retention.Pruner{Store: b, Destination: "minio", Policy: retention.KeepLast(2), DryRun: true, Now: time.Now}
	report, err := dry.Prune(t.Context(), "prod-a")
	require.NoError(t, err)
	require.Equal(t, 3, report.Count(retention.WouldDelete))
	require.Len(t, keysUnder(t, b, "prod-a/"), 11)

	p := &retention.Pruner{Store: b, Destination: "minio", Policy: retention.KeepLast(2), Now: time.Now}
	report, err = p.Prune(t.Context(), "prod-a")
	require.NoError(t, err)
	require.Equal(t, 3, report.Count(retention.Deleted))

	left := keysUnder(t, b, "prod-a/")
	want := []string{"prod-a/snapshot.db"}
	for _, m := range a[3:] {
		want = append(want, "prod-a/"+m.DataKey, "prod-a/"+backup.ManifestKey(m.DataKey))
	}
	require.ElementsMatch(t, want, left, "exactly the 2 newest and the legacy object")
	require.Equal(t, prodAB, keysUnder(t, b, "prod-ab/"), "prod-ab untouched")

	// Teardown of prod-a keeps the legacy object unless told otherwise.
	td := &retention.Teardown{Store: b, Destination: "minio"}
	_, err = td.Run(t.Context(), "prod-a")
	require.NoError(t, err)
	require.Equal(t, []string{"prod-a/snapshot.db"}, keysUnder(t, b, "prod-a/"))
	require.Equal(t, prodAB, keysUnder(t, b, "prod-ab/"))
	for _, bad := range []string{"", " ", "*", "prod-*", "../prod-a", "prod-a/"} {
		_, err := td.Run(t.Context(), bad)
		require.ErrorIs(t, err, backup.ErrInvalidName, "%q", bad)
	}
}

func TestPruneSkipsObjectLocked(t *testing.T) {
	srv := miniotest.Start(t)
	b := newBucket(t, srv, true)
	ms := backups(t, b, "prod-a", 3)
	until := time.Now().Add(time.Hour)
	for _, key := range []string{ms[0].DataKey, backup.ManifestKey(ms[0].DataKey)} {
		require.NoError(t, b.SetRetention(t.Context(), "prod-a/"+key, storage.Retention{Mode: storage.Governance, Until: until}))
	}
	p := &retention.Pruner{Store: b, Destination: "locked", Policy: retention.KeepLast(1), Now: time.Now}
	report, err := p.Prune(t.Context(), "prod-a")
	require.NoError(t, err)
	require.Equal(t, 1, report.Count(retention.Deleted))
	require.Equal(t, 1, report.Count(retention.Skipped))
	for _, it := range report.Items {
		if it.Outcome == retention.Skipped {
			require.Equal(t, ms[0].ID, it.Entry.ID)
			require.True(t, strings.HasPrefix(it.Reason, "object lock"), it.Reason)
		}
	}
	left := keysUnder(t, b, "prod-a/")
	require.Contains(t, left, "prod-a/"+ms[0].DataKey, "the locked backup survives")
	require.Contains(t, left, "prod-a/"+backup.ManifestKey(ms[0].DataKey), "with its manifest")
	require.NotContains(t, left, "prod-a/"+ms[1].DataKey)
	require.Contains(t, left, "prod-a/"+ms[2].DataKey)
}

type readOnly struct{ storage.Bucket }

func (readOnly) ReadOnly() bool { return true }

func TestPruneRefusesReadOnly(t *testing.T) {
	srv := miniotest.Start(t)
	b := newBucket(t, srv, false)
	backups(t, b, "c", 2)
	p := &retention.Pruner{Store: readOnly{b}, Policy: retention.KeepLast(1)}
	_, err := p.Prune(t.Context(), "c")
	require.ErrorIs(t, err, storage.ErrReadOnly)
	require.Len(t, keysUnder(t, b, "c/"), 4)
}
