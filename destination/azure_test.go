package destination_test

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/azuritetest"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/azure"
)

// An azblob:// destination with a shared key of its own, as seed 004's
// Azure backup target with its credential secret: backups work with the
// right key; a wrong key or another account's key leaves the destination
// unavailable for auth, without the key in any message.
func TestAzureSharedKeyWithAzurite(t *testing.T) {
	srv := azuritetest.Start(t)
	c := srv.NewContainer(t)
	container := c.URL()[strings.LastIndex(c.URL(), "/")+1:]
	wrongKey := base64.StdEncoding.EncodeToString([]byte("canary-wrong-key-0123456789abcdef0123456789abcdef"))
	ctx := testCtx(t)

	r, err := destination.NewRegistry(destination.Options{
		Drivers: []blob.Driver{azure.Driver()},
		Secrets: destination.StaticSecrets{
			"azure": {AccessKey: azuritetest.Account, SecretKey: azuritetest.Key},
			"wrong": {AccessKey: azuritetest.Account, SecretKey: wrongKey},
			"other": {AccessKey: "otheraccount", SecretKey: azuritetest.Key},
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	url := func(prefix, query string) string {
		return fmt.Sprintf("azblob://%s/%s?endpoint=%s&insecure=true%s", container, prefix, srv.Endpoint(), query)
	}
	secret := func(name string) destination.Credentials {
		return destination.Credentials{Source: destination.SourceSecret, Secret: name}
	}

	good, err := r.Add(ctx, destination.Spec{Name: "azure", URL: url("seed-eu", ""), Credentials: secret("azure")})
	require.NoError(t, err)
	st, err := r.Check(ctx, "azure")
	require.NoError(t, err)
	require.True(t, st.Available(), "%+v", st)
	res := runBackup(t, ctx, "prod-a", "nightly", 1, good.Target())
	entries, err := backup.ListBackups(ctx, good, "prod-a")
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, res.ID, entries[0].ID)

	_, err = r.Add(ctx, destination.Spec{Name: "wrong", URL: url("wrong", ""), Credentials: secret("wrong")})
	require.NoError(t, err)
	st, err = r.Check(ctx, "wrong")
	require.NoError(t, err)
	assert.False(t, st.Available())
	assert.Equal(t, destination.ReasonAuth, st.Reason, st.Message)
	assert.NotContains(t, st.Message, wrongKey)

	_, err = r.Add(ctx, destination.Spec{Name: "other", URL: url("other", "&account="+azuritetest.Account), Credentials: secret("other")})
	require.NoError(t, err)
	st, err = r.Check(ctx, "other")
	require.NoError(t, err)
	assert.False(t, st.Available())
	assert.Contains(t, st.Message, "otheraccount", st.Message)

	for _, c := range []destination.Credentials{
		{Source: destination.SourceIAM},
		{Source: destination.SourceEnv},
		{Source: destination.SourceAnonymous},
	} {
		err := destination.Spec{Name: "x", URL: url("x", ""), Credentials: c}.Validate()
		require.ErrorIs(t, err, destination.ErrInvalidSpec, "%+v", c)
		assert.Contains(t, err.Error(), "shared key")
	}
	require.NoError(t, destination.Spec{Name: "x", URL: url("x", ""),
		Credentials: destination.Credentials{Source: destination.SourceEnv, AccessKeyEnv: "AZ_ACCOUNT", SecretKeyEnv: "AZ_KEY"}}.Validate())
}

// TestAzureConnectionStringWithURLAccount: an azblob:// destination without
// credentials of its own opens with the environment's connection string
// only where its URL agrees with it: one naming another account is left
// unavailable, never opened on the connection string's account.
func TestAzureConnectionStringWithURLAccount(t *testing.T) {
	srv := azuritetest.Start(t)
	c := srv.NewContainer(t)
	container := c.URL()[strings.LastIndex(c.URL(), "/")+1:]
	for _, v := range []string{"AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGEBLOB_CONNECTIONSTRING"} {
		t.Setenv(v, "")
	}
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "DefaultEndpointsProtocol=http;AccountName="+azuritetest.Account+
		";AccountKey="+azuritetest.Key+";BlobEndpoint=http://"+srv.Endpoint()+"/"+azuritetest.Account+";")
	ctx := testCtx(t)
	r, err := destination.NewRegistry(destination.Options{Drivers: []blob.Driver{azure.Driver()}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close()) })

	for name, query := range map[string]string{
		"bare": "",
		"same": "?account=" + azuritetest.Account + "&endpoint=" + srv.Endpoint() + "&insecure=true",
	} {
		_, err := r.Add(ctx, destination.Spec{Name: name, URL: fmt.Sprintf("azblob://%s/%s%s", container, name, query)})
		require.NoError(t, err)
		st, err := r.Check(ctx, name)
		require.NoError(t, err)
		require.True(t, st.Available(), "%s: %+v", name, st)
	}
	_, err = r.Add(ctx, destination.Spec{Name: "other", URL: fmt.Sprintf("azblob://%s/other?account=otheraccount&endpoint=%s&insecure=true", container, srv.Endpoint())})
	require.NoError(t, err)
	st, err := r.Check(ctx, "other")
	require.NoError(t, err)
	require.False(t, st.Available(), "%+v", st)
	require.Contains(t, st.Message, "otheraccount")
	require.NotContains(t, st.Message, azuritetest.Key)
}
