package destination_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
)

// A MinIO behind the certificate of a private authority: a destination
// reaches it once it trusts that authority, by PEM or by file, and not
// before; the settings are checked when the spec is.
func TestPrivateCertificateAuthorityWithMinIO(t *testing.T) {
	ca := etcdtest.NewCA(t)
	files := ca.Issue(t, etcdtest.CertOptions{CommonName: "minio"})
	srv := miniotest.StartTLS(t, miniotest.TLS{CertFile: files.CertFile, KeyFile: files.KeyFile, CAFile: files.CAFile})
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	caPEM, err := os.ReadFile(files.CAFile)
	require.NoError(t, err)
	ctx := testCtx(t)

	r, err := destination.NewRegistry(destination.Options{
		Secrets: destination.StaticSecrets{"minio": {AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey()}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	secret := destination.Credentials{Source: destination.SourceSecret, Secret: "minio"}
	url := func(prefix string) string {
		return fmt.Sprintf("s3://%s/%s?endpoint=%s&region=us-east-1&pathStyle=true", bucket, prefix, srv.Endpoint())
	}

	untrusted, err := r.Add(ctx, destination.Spec{Name: "untrusted", URL: url("a"), Credentials: secret})
	require.NoError(t, err)
	st, err := r.Check(ctx, "untrusted")
	require.NoError(t, err)
	require.False(t, st.Available())
	assert.Contains(t, st.Message, "certificate", st.Message)

	byPEM, err := r.Add(ctx, destination.Spec{Name: "pem", URL: url("b"), Credentials: secret, CACertPEM: string(caPEM)})
	require.NoError(t, err)
	byFile, err := r.Add(ctx, destination.Spec{Name: "file", URL: url("c"), Credentials: secret, CACertFile: files.CAFile})
	require.NoError(t, err)
	for _, d := range []*destination.Destination{byPEM, byFile} {
		st, err := r.Check(ctx, d.Name())
		require.NoError(t, err)
		require.True(t, st.Available(), "%s: %+v", d.Name(), st)
		res := runBackup(t, ctx, "prod-a", "nightly", 1, d.Target())
		entries, err := backup.ListBackups(ctx, d, "prod-a")
		require.NoError(t, err)
		require.Len(t, entries, 1, d.Name())
		assert.Equal(t, res.ID, entries[0].ID)
	}

	// Trusting the authority through an update reopens the destination.
	spec := untrusted.Spec()
	spec.CACertFile = files.CAFile
	_, err = r.Update(ctx, "untrusted", spec)
	require.NoError(t, err)
	st, err = r.Check(ctx, "untrusted")
	require.NoError(t, err)
	assert.True(t, st.Available(), "%+v", st)

	// A file that is gone leaves the destination unavailable, saying why.
	spec.CACertFile = files.CAFile + ".gone"
	_, err = r.Update(ctx, "untrusted", spec)
	require.NoError(t, err)
	st, err = r.Check(ctx, "untrusted")
	require.NoError(t, err)
	assert.False(t, st.Available())
	assert.Contains(t, st.Message, "ca certificates", st.Message)

	for name, spec := range map[string]destination.Spec{
		"no certificate":  {Name: "x", URL: url("x"), CACertPEM: "not a certificate"},
		"plain http":      {Name: "x", URL: url("x") + "&insecure=true", CACertFile: files.CAFile},
		"not an s3 store": {Name: "x", URL: "file:///tmp/x", CACertFile: files.CAFile},
	} {
		err := spec.Validate()
		require.ErrorIs(t, err, destination.ErrInvalidSpec, name)
		assert.Contains(t, err.Error(), "ca certificates", name)
	}
}
