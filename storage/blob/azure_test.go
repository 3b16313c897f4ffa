package blob_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/azureblob"

	"github.com/etcdbackup/etcdbackup/internal/azuritetest"
	"github.com/etcdbackup/etcdbackup/internal/faultproxy"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/azure"
	"github.com/etcdbackup/etcdbackup/storage/storagetest"
)

// TestAzure runs the suite on gocloud's azblob:// driver against Azurite.
func TestAzure(t *testing.T) {
	srv := azuritetest.Start(t)
	storagetest.Run(t, func(t *testing.T) storagetest.Fixture {
		// Through a fault proxy, which loses answers for the suite's
		// lost-answer case.
		proxy := faultproxy.StartHTTP(t, srv.Endpoint())
		direct := srv.NewContainer(t)
		c, err := container.NewClientWithSharedKeyCredential(
			strings.Replace(direct.URL(), srv.Endpoint(), proxy.Addr(), 1), srv.Credential(), nil)
		require.NoError(t, err)
		gb, err := azureblob.OpenBucket(t.Context(), c, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = gb.Close() })
		return storagetest.Fixture{
			Bucket:     blob.New(gb, &blob.Options{WholeBody: true, ErrorCode: azure.ErrorCode}),
			LoseAnswer: func(*testing.T) func() bool { return proxy.LoseNextAnswer(faultproxy.IsAzureCommit) },
		}
	})
}

// Azure's refusals and a missing container map to the storage sentinels,
// which gocloud leaves Unknown for most of Azure's error codes.
func TestAzureErrors(t *testing.T) {
	srv := azuritetest.Start(t)
	open := func(t *testing.T, c *container.Client) *blob.Bucket {
		gb, err := azureblob.OpenBucket(t.Context(), c, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = gb.Close() })
		return blob.New(gb, &blob.Options{WholeBody: true, ErrorCode: azure.ErrorCode})
	}
	listErr := func(b *blob.Bucket) error {
		for _, err := range b.List(t.Context(), "") {
			return err
		}
		return nil
	}

	missing, err := container.NewClientWithSharedKeyCredential(srv.ServiceURL()+"no-such-container", srv.Credential(), nil)
	require.NoError(t, err)
	require.ErrorIs(t, listErr(open(t, missing)), storage.ErrBucketNotFound)

	wrong, err := azblob.NewSharedKeyCredential(azuritetest.Account, base64.StdEncoding.EncodeToString([]byte("not the account key")))
	require.NoError(t, err)
	refused, err := container.NewClientWithSharedKeyCredential(srv.NewContainer(t).URL(), wrong, nil)
	require.NoError(t, err)
	b := open(t, refused)
	require.ErrorIs(t, listErr(b), storage.ErrPermission)
	require.ErrorIs(t, b.Put(t.Context(), "k", strings.NewReader("v"), nil), storage.ErrPermission)
}
