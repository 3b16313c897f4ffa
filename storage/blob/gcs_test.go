package blob_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/gcp"

	"github.com/etcdbackup/etcdbackup/internal/gcstest"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/storagetest"
)

// TestGCS runs the suite on gocloud's gs:// driver against fake-gcs-server.
func TestGCS(t *testing.T) {
	srv := gcstest.Start(t)
	storagetest.Run(t, func(t *testing.T) storagetest.Fixture {
		gb, err := gcsblob.OpenBucket(t.Context(), new(gcp.HTTPClient), srv.NewBucket(t),
			&gcsblob.Options{ClientOptions: srv.ClientOptions()})
		require.NoError(t, err)
		t.Cleanup(func() { _ = gb.Close() })
		return storagetest.Fixture{Bucket: blob.New(gb, nil)}
	})
}
