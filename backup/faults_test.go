package backup_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/faultproxy"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// verifyNoLeaks checks for leaked goroutines once the test and all its
// cleanups (servers, proxies) are done.
func verifyNoLeaks(t *testing.T) {
	t.Cleanup(func() {
		goleak.VerifyNone(t,
			goleak.IgnoreCurrent(),
			// Idle keep-alive connections of shared HTTP transports.
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		)
	})
}

// TestFaultMatrix runs one backup per S3 fault through a proxy in front of
// MinIO. Each either succeeds after retries or fails; in every case no
// partial backup is visible, no incomplete multipart upload remains, and a
// backup without the fault then succeeds.
func TestFaultMatrix(t *testing.T) {
	verifyNoLeaks(t)
	srv := miniotest.Start(t)
	proxy := faultproxy.StartHTTP(t, srv.Endpoint())
	stream := fakeSnapshot(t, 24<<20/512, 11) // 24 MiB: five parts of 5 MiB

	cases := []struct {
		name    string
		rule    faultproxy.Rule
		succeed bool
		// orphan: the failure leaves the data object, with no manifest,
		// for retention: a manifest write whose outcome is in doubt may
		// still land, so its data is kept.
		orphan bool
	}{
		{"reset during part 2 once", faultproxy.Rule{Match: faultproxy.IsUploadPart(2), Action: faultproxy.ResetAfter, Bytes: 1 << 20, Times: 1}, true, false},
		{"reset during every part", faultproxy.Rule{Match: faultproxy.IsUploadPart(0), Action: faultproxy.ResetAfter, Bytes: 1 << 20}, false, false},
		{"503 SlowDown burst (within the retry budget of 3 tries)", faultproxy.Rule{Match: faultproxy.IsWrite, Action: faultproxy.SlowDown, Times: 2}, true, false},
		{"503 SlowDown always", faultproxy.Rule{Match: faultproxy.IsUploadPart(0), Action: faultproxy.SlowDown}, false, false},
		{"slow part responses", faultproxy.Rule{Match: faultproxy.IsUploadPart(0), Action: faultproxy.Delay, Delay: 300 * time.Millisecond}, true, false},
		{"200 with error on complete once", faultproxy.Rule{Match: faultproxy.IsCompleteMultipart, Action: faultproxy.OKWithError, Times: 1}, true, false},
		{"200 with error on every complete", faultproxy.Rule{Match: faultproxy.IsCompleteMultipart, Action: faultproxy.OKWithError}, false, false},
		{"reset on the manifest put", faultproxy.Rule{Match: faultproxy.IsPutObject, Action: faultproxy.ResetAfter, Bytes: 10}, false, true},
		{"500 on every write", faultproxy.Rule{Match: faultproxy.IsWrite, Action: faultproxy.InternalError}, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bucket := srv.NewBucket(t, miniotest.BucketOptions{})
			opts := srv.S3Options(bucket)
			opts.Endpoint, opts.PartSize, opts.PartsInFlight, opts.MaxRetries = proxy.Addr(), 5<<20, 2, 3
			b, err := s3.New(opts)
			require.NoError(t, err)
			direct := newS3(t, srv, bucket)
			tc.rule.Name = tc.name
			proxy.SetRules(tc.rule)
			p := &backup.Pipeline{Snapshotter: newSnapshotter(stream), Compression: backup.None}
			res, err := p.Run(t.Context(), backup.Request{Cluster: "c", Name: "n", Scheduled: true,
				Targets: []backup.Target{{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: b}}}})
			proxy.SetRules()
			require.Positive(t, proxy.Fired()[tc.name], "the fault fired")
			if tc.succeed {
				require.NoError(t, err)
				require.Len(t, listKeys(t, direct), 2, "data and manifest")
				m := res.Outcomes[0].Manifest
				require.Equal(t, m.Stored.SHA256, sha256Hex(readObject(t, direct, "c/"+m.DataKey)))
			} else {
				require.Error(t, err)
				t.Logf("failed as expected: %v", err)
				keys := listKeys(t, direct)
				if tc.orphan {
					require.Len(t, keys, 1, "the data object is kept")
					require.False(t, strings.HasSuffix(keys[0], backup.ManifestSuffix), "no manifest: nothing visible")
				} else {
					require.Empty(t, keys, "no partial backup visible")
				}
			}
			uploads, err := srv.IncompleteUploads(t.Context(), bucket)
			require.NoError(t, err)
			require.Empty(t, uploads, "no incomplete multipart upload")

			// The next backup, without the fault, succeeds.
			p.Snapshotter = newSnapshotter(fakeSnapshot(t, 4<<20/512, 12))
			p.Now = func() time.Time { return time.Now().Add(time.Hour) } // another ID
			_, err = p.Run(t.Context(), backup.Request{Cluster: "c", Name: "n", Scheduled: true,
				Targets: []backup.Target{{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: b}}}})
			require.NoError(t, err)
		})
	}
}

// TestDroppedSnapshotStream cuts the etcd connection in the middle of the
// snapshot stream: the backup fails and nothing is visible.
func TestDroppedSnapshotStream(t *testing.T) {
	verifyNoLeaks(t)
	etcd := etcdtest.Start(t)
	_, err := etcdtest.Fill(t.Context(), etcd.Client(t), etcdtest.FillOptions{Keys: 4000, Seed: 3})
	require.NoError(t, err)
	u, err := url.Parse(etcd.Endpoints()[0])
	require.NoError(t, err)
	proxy := faultproxy.StartTCP(t, u.Host)

	srv := miniotest.Start(t)
	b := newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{}))
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: []string{"http://" + proxy.Addr()}})
	require.NoError(t, err)
	p := &backup.Pipeline{Snapshotter: snapshotter}
	req := backup.Request{Cluster: "c", Name: "n", Scheduled: true,
		Targets: []backup.Target{{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: b}}}}

	proxy.DropAfter(3 << 20)
	_, err = p.Run(t.Context(), req)
	require.Error(t, err)
	require.Positive(t, proxy.Dropped())
	require.Empty(t, listKeys(t, b))

	proxy.DropAfter(0)
	_, err = p.Run(t.Context(), req)
	require.NoError(t, err)
	require.Len(t, listKeys(t, b), 2)
}
