package backup_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/faultproxy"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// The manifest PUT reaches MinIO and is stored, but every answer
// about the manifest key is lost (the link stays broken for those requests:
// the retry too, the token check's HEAD and the read-back). Commit fails
// with a transport error, not ErrExist: the outcome is in doubt, so the
// run's data object must stay, or the stored manifest would name deleted
// data.
func TestCommitKeepsDataWhenManifestAnswersAreLost(t *testing.T) {
	srv := miniotest.Start(t)
	proxy := faultproxy.StartHTTP(t, srv.Endpoint())
	stream := fakeSnapshot(t, 64, 22)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	opts := srv.S3Options(bucket)
	opts.Endpoint, opts.MaxRetries = proxy.Addr(), 2
	b, err := s3.New(opts)
	require.NoError(t, err)
	direct := newS3(t, srv, bucket)
	proxy.SetRules(faultproxy.Rule{Name: "manifest", Action: faultproxy.LoseAnswer,
		Match: func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, backup.ManifestSuffix) }})
	p := &backup.Pipeline{Snapshotter: newSnapshotter(stream), Compression: backup.None}
	_, err = p.Run(t.Context(), backup.Request{Cluster: "c", Name: "n", Scheduled: true,
		Targets: []backup.Target{{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: b}}}})
	proxy.SetRules()
	t.Logf("run error: %v", err)
	keys := listKeys(t, direct)
	t.Logf("keys left: %v", keys)
	entries, lerr := backup.ListBackups(t.Context(), direct, "c")
	require.NoError(t, lerr)
	for _, e := range entries {
		t.Logf("entry kind=%v key=%s manifest=%s", e.Kind, e.Key, e.ManifestKey)
	}
	require.Len(t, keys, 2, "the stored manifest's data object must not be deleted")
	require.Len(t, entries, 1)
	require.Equal(t, backup.KindBackup, entries[0].Kind, "the stored manifest names its data")
}
