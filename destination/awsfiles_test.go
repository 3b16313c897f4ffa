package destination_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
)

// TestAWSSharedFiles: an S3 destination takes the AWS CLI's credentials
// and config file pair, for the default profile or a named one, with the
// region from the config file, against MinIO.
func TestAWSSharedFiles(t *testing.T) {
	ctx := testCtx(t)
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	credsFile := write("credentials", fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", srv.AccessKey(), srv.SecretKey()))
	configFile := write("config", fmt.Sprintf("[default]\nregion = us-east-1\n\n[profile ops]\nregion = us-east-1\naws_access_key_id = %s\naws_secret_access_key = %s\n", srv.AccessKey(), srv.SecretKey()))
	wrong := write("wrong", "[default]\naws_access_key_id = nobody\naws_secret_access_key = CANARY-wrong-secret\n")

	r := newRegistry(t, destination.Options{CredentialSources: destination.CredentialSources{Dirs: []string{dir}}})
	url := func(prefix string) string {
		return fmt.Sprintf("s3://%s/%s?endpoint=%s&insecure=true", bucket, prefix, srv.Endpoint())
	}
	for name, creds := range map[string]destination.Credentials{
		"pair":        {Source: destination.SourceAWSFiles, AWSCredentialsFile: credsFile, AWSConfigFile: configFile},
		"profile-ops": {Source: destination.SourceAWSFiles, AWSConfigFile: configFile, Profile: "ops"},
		"wrong-keys":  {Source: destination.SourceAWSFiles, AWSCredentialsFile: wrong, AWSConfigFile: configFile},
	} {
		d, err := r.Add(ctx, destination.Spec{Name: name, URL: url(name), Credentials: creds})
		require.NoError(t, err)
		st, err := r.Check(ctx, name)
		require.NoError(t, err)
		if name == "wrong-keys" {
			require.Equal(t, destination.ReasonAuth, st.Reason, "%+v", st)
			require.False(t, strings.Contains(st.Message, "CANARY"))
			continue
		}
		require.True(t, st.Available(), "%s: %+v", name, st)
		require.NoError(t, d.Put(ctx, "prod-a/x", strings.NewReader("x"), nil))
	}
	_, err := r.Add(ctx, destination.Spec{Name: "none", URL: url("none"), Credentials: destination.Credentials{Source: destination.SourceAWSFiles}})
	require.ErrorIs(t, err, destination.ErrInvalidSpec)
	_, err = r.Add(ctx, destination.Spec{Name: "mixed", URL: url("mixed"), Credentials: destination.Credentials{Source: destination.SourceFiles, SecretKeyFile: credsFile, AWSConfigFile: configFile}})
	require.ErrorIs(t, err, destination.ErrInvalidSpec)
}
