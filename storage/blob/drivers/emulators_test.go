package drivers_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/azureblob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/gcp"

	"github.com/etcdbackup/etcdbackup/internal/azuritetest"
	"github.com/etcdbackup/etcdbackup/internal/gcstest"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
)

// TestGCSURL opens fake-gcs-server through a gs:// URL as a host would,
// the emulator named by the environment variable Cloud Storage clients
// honour.
func TestGCSURL(t *testing.T) {
	srv := gcstest.Start(t)
	name := srv.NewBucket(t)
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimSuffix(strings.TrimPrefix(srv.Endpoint(), "http://"), "/storage/v1/"))

	b, err := blob.Open(t.Context(), drivers.NewURLMux(nil), "gs://"+name+"?prefix=backups/", nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	checkPrefixedBucket(t, b)

	gb, err := gcsblob.OpenBucket(t.Context(), new(gcp.HTTPClient), name, &gcsblob.Options{ClientOptions: srv.ClientOptions()})
	require.NoError(t, err)
	whole := blob.New(gb, nil)
	defer func() { require.NoError(t, gb.Close()) }()
	assertKeys(t, whole, "backups/prod-a/snap.db")
}

// TestAzureURL opens Azurite through an azblob:// URL as a host would, with
// the account and key from the environment. azureblob reads the
// environment once per process, on its first azblob:// URL: no other test in
// this package opens one.
func TestAzureURL(t *testing.T) {
	srv := azuritetest.Start(t)
	c := srv.NewContainer(t)
	t.Setenv("AZURE_STORAGE_ACCOUNT", azuritetest.Account)
	t.Setenv("AZURE_STORAGE_KEY", azuritetest.Key)

	u := fmt.Sprintf("azblob://%s?protocol=http&domain=%s&localemu=true&prefix=backups/", containerName(c.URL()), srv.Endpoint())
	b, err := blob.Open(t.Context(), drivers.NewURLMux(nil), u, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	checkPrefixedBucket(t, b)

	gb, err := azureblob.OpenBucket(t.Context(), c, nil)
	require.NoError(t, err)
	whole := blob.New(gb, nil)
	defer func() { require.NoError(t, gb.Close()) }()
	assertKeys(t, whole, "backups/prod-a/snap.db")
}

// containerName returns the last path element of a container URL.
func containerName(u string) string {
	return u[strings.LastIndex(strings.TrimSuffix(u, "/"), "/")+1:]
}

// checkPrefixedBucket writes through b, fails a write, and reads back: the
// failed write leaves nothing, the good one is all b lists.
func checkPrefixedBucket(t *testing.T, b *blob.Bucket) {
	t.Helper()
	ctx := t.Context()
	require.NoError(t, b.Put(ctx, "prod-a/snap.db", strings.NewReader("data"), nil))
	err := b.Put(ctx, "prod-a/big.db", &failing{n: 9 << 20}, nil)
	require.ErrorIs(t, err, errFailing)
	assertKeys(t, b, "prod-a/snap.db")
	info, err := b.Stat(ctx, "prod-a/snap.db")
	require.NoError(t, err)
	assert.EqualValues(t, 4, info.Size)
	_, err = b.Stat(ctx, "prod-a/none")
	require.ErrorIs(t, err, storage.ErrNotFound)
}

func assertKeys(t *testing.T, b *blob.Bucket, want ...string) {
	t.Helper()
	var keys []string
	for info, err := range b.List(t.Context(), "") {
		require.NoError(t, err)
		keys = append(keys, info.Key)
	}
	assert.Equal(t, want, keys)
}

// Without Google credentials a gs:// URL fails to open, saying so, and
// prints nothing (gocloud's own default opener prints a warning to stdout
// and goes on unauthenticated).
func TestGCSURLWithoutCredentials(t *testing.T) {
	t.Setenv("STORAGE_EMULATOR_HOST", "")
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(t.TempDir(), "none.json"))
	r, w, err := os.Pipe()
	require.NoError(t, err)
	stdout := os.Stdout
	os.Stdout = w
	_, err = blob.Open(t.Context(), drivers.NewURLMux(nil), "gs://some-bucket", nil)
	os.Stdout = stdout
	require.NoError(t, w.Close())
	printed, rerr := io.ReadAll(r)
	require.NoError(t, rerr)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no Google Application Default Credentials")
	assert.Empty(t, string(printed))
}
