package blob_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/azureblob"

	"github.com/etcdbackup/etcdbackup/internal/azuritetest"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/storagetest"
)

// TestAzure runs the suite on gocloud's azblob:// driver against Azurite.
func TestAzure(t *testing.T) {
	srv := azuritetest.Start(t)
	storagetest.Run(t, func(t *testing.T) storagetest.Fixture {
		gb, err := azureblob.OpenBucket(t.Context(), srv.NewContainer(t), nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = gb.Close() })
		return storagetest.Fixture{Bucket: blob.New(gb, nil)}
	})
}
