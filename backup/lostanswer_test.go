package backup_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/faultproxy"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// TestLostAnswerKeepsBackup: MinIO stores an object of the backup but its
// answer is lost on the way back (a connection reset after the request
// arrived), so the client's retry of the exclusive put is refused because
// the key exists. The object is the run's own: the backup succeeds, whole,
// and nothing of it is deleted, whichever object the answer was lost for.
func TestLostAnswerKeepsBackup(t *testing.T) {
	verifyNoLeaks(t)
	srv := miniotest.Start(t)
	proxy := faultproxy.StartHTTP(t, srv.Endpoint())
	large := fakeSnapshot(t, 24<<20/512, 21) // multipart with 5 MiB parts
	small := fakeSnapshot(t, 64, 22)         // one PutObject, as a segment's data is

	cases := []struct {
		name   string
		stream []byte
		match  func(*http.Request) bool
	}{
		{"the data object's completion", large, faultproxy.IsCompleteMultipart},
		{"the manifest", large, faultproxy.IsPutObject},
		{"a small data object", small, faultproxy.IsPutObject},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bucket := srv.NewBucket(t, miniotest.BucketOptions{})
			opts := srv.S3Options(bucket)
			opts.Endpoint, opts.PartSize, opts.PartsInFlight = proxy.Addr(), 5<<20, 2
			b, err := s3.New(opts)
			require.NoError(t, err)
			direct := newS3(t, srv, bucket)
			fired := proxy.LoseNextAnswer(tc.match)
			p := &backup.Pipeline{Snapshotter: newSnapshotter(tc.stream), Compression: backup.None}
			res, err := p.Run(t.Context(), backup.Request{Cluster: "c", Name: "n", Scheduled: true,
				Targets: []backup.Target{{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: b}}}})
			proxy.SetRules()
			require.True(t, fired(), "the answer was lost")
			require.NoError(t, err)
			require.Len(t, listKeys(t, direct), 2, "data and manifest")
			m := res.Outcomes[0].Manifest
			require.Equal(t, m.Stored.SHA256, sha256Hex(readObject(t, direct, "c/"+m.DataKey)))
			entries, err := backup.ListBackups(t.Context(), direct, "c")
			require.NoError(t, err)
			require.Len(t, entries, 1)
			require.Equal(t, backup.KindBackup, entries[0].Kind)
		})
	}
}
