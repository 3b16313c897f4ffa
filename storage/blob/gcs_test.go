package blob_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/gcp"
	"google.golang.org/api/option"

	"github.com/etcdbackup/etcdbackup/internal/faultproxy"
	"github.com/etcdbackup/etcdbackup/internal/gcstest"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/storagetest"
)

// TestGCS runs the suite on gocloud's gs:// driver against fake-gcs-server.
func TestGCS(t *testing.T) {
	srv := gcstest.Start(t)
	storagetest.Run(t, func(t *testing.T) storagetest.Fixture {
		// Through a fault proxy, which loses answers for the suite's
		// lost-answer case.
		proxy := faultproxy.StartHTTP(t, srv.Addr())
		proxy.UseTargetHost()
		gb, err := gcsblob.OpenBucket(t.Context(), new(gcp.HTTPClient), srv.NewBucket(t),
			&gcsblob.Options{ClientOptions: []option.ClientOption{
				option.WithEndpoint("http://" + proxy.Addr() + "/storage/v1/"), option.WithoutAuthentication()}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = gb.Close() })
		return storagetest.Fixture{
			Bucket:     blob.New(gb, nil),
			LoseAnswer: func(*testing.T) func() bool { return proxy.LoseNextAnswer(faultproxy.IsGCSCommit) },
		}
	})
}
