package blob_test

import (
	"encoding/base64"
	"net/url"
	"path"
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

// TestAzureConnectionStringKeepsTheURLsAccount: with the environment's
// connection string, a URL that names another account, domain or protocol
// is refused; azureblob's opener would drop them and open the connection
// string's container of that name.
func TestAzureConnectionStringKeepsTheURLsAccount(t *testing.T) {
	srv := azuritetest.Start(t)
	name := path.Base(srv.NewContainer(t).URL())
	for _, v := range []string{"AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGEBLOB_CONNECTIONSTRING"} {
		t.Setenv(v, "")
	}
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "DefaultEndpointsProtocol=http;AccountName="+azuritetest.Account+
		";AccountKey="+azuritetest.Key+";BlobEndpoint=http://"+srv.Endpoint()+"/"+azuritetest.Account+";")
	open := func(t *testing.T, query string) error {
		u, err := url.Parse("azblob://" + name + query)
		require.NoError(t, err)
		gb, err := azure.URLOpener().OpenBucketURL(t.Context(), u)
		if err != nil {
			return err
		}
		t.Cleanup(func() { _ = gb.Close() })
		b := blob.New(gb, &blob.Options{WholeBody: true, ErrorCode: azure.ErrorCode})
		return b.Put(t.Context(), "k", strings.NewReader("v"), nil)
	}
	for _, q := range []string{"", "?storage_account=" + azuritetest.Account,
		"?storage_account=" + strings.ToUpper(azuritetest.Account) + "&domain=" + srv.Endpoint() + "&protocol=http"} {
		require.NoError(t, open(t, q), "the connection string's own account: %q", q)
	}
	for _, q := range []string{"?storage_account=someoneelse", "?domain=127.0.0.1:1", "?protocol=https",
		"?storage_account=" + azuritetest.Account + "&domain=blob.core.windows.net", "?localemu=true"} {
		err := open(t, q)
		require.Error(t, err, "%q", q)
		require.NotContains(t, err.Error(), azuritetest.Key)
	}
}
