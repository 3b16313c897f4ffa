package destination

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResolveCredentials(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	ak, sk, tok := write("ak", "  AKIDFILE\n"), write("sk", "secret-from-file\n"), write("tok", "token-from-file")
	empty := write("empty", " \n")
	t.Setenv("EU_AK", "AKIDENV")
	t.Setenv("EU_SK", "secret-from-env")
	t.Setenv("EU_EMPTY", "")
	secrets := StaticSecrets{"kube-system/eu": {AccessKey: "AKIDSTATIC", SecretKey: "secret-static"}}

	tests := []struct {
		name    string
		creds   Credentials
		secrets SecretResolver
		want    credentials.Value // compared on keys only
		err     bool
	}{
		{name: "static secret", creds: Credentials{Source: SourceSecret, Secret: "kube-system/eu"}, secrets: secrets,
			want: credentials.Value{AccessKeyID: "AKIDSTATIC", SecretAccessKey: "secret-static"}},
		{name: "unknown secret", creds: Credentials{Source: SourceSecret, Secret: "kube-system/us"}, secrets: secrets, err: true},
		{name: "no resolver", creds: Credentials{Source: SourceSecret, Secret: "kube-system/eu"}, err: true},
		{name: "resolver returns nil", creds: Credentials{Source: SourceSecret, Secret: "x"},
			secrets: SecretResolverFunc(func(context.Context, string, string) (*credentials.Credentials, error) { return nil, nil }), err: true},
		{name: "files", creds: Credentials{Source: SourceFiles, AccessKeyFile: ak, SecretKeyFile: sk, SessionTokenFile: tok},
			want: credentials.Value{AccessKeyID: "AKIDFILE", SecretAccessKey: "secret-from-file", SessionToken: "token-from-file"}},
		{name: "missing file", creds: Credentials{Source: SourceFiles, AccessKeyFile: ak, SecretKeyFile: filepath.Join(dir, "nope")}, err: true},
		{name: "empty file", creds: Credentials{Source: SourceFiles, AccessKeyFile: empty, SecretKeyFile: sk}, err: true},
		{name: "env", creds: Credentials{Source: SourceEnv, AccessKeyEnv: "EU_AK", SecretKeyEnv: "EU_SK"},
			want: credentials.Value{AccessKeyID: "AKIDENV", SecretAccessKey: "secret-from-env"}},
		{name: "empty env", creds: Credentials{Source: SourceEnv, AccessKeyEnv: "EU_AK", SecretKeyEnv: "EU_EMPTY"}, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tt.creds.resolve(ctx, "eu", tt.secrets, AnySource())
			if err == nil {
				var v credentials.Value
				v, err = c.GetWithContext(nil)
				if err == nil {
					require.False(t, tt.err, "want an error")
					assert.Equal(t, tt.want.AccessKeyID, v.AccessKeyID)
					assert.Equal(t, tt.want.SecretAccessKey, v.SecretAccessKey)
					assert.Equal(t, tt.want.SessionToken, v.SessionToken)
					return
				}
			}
			require.True(t, tt.err, "unexpected error: %v", err)
			require.ErrorIs(t, err, ErrCredentials)
			assert.Equal(t, ReasonAuth, Classify(err))
			for _, s := range []string{"secret-from-file", "secret-from-env", "secret-static"} {
				assert.NotContains(t, err.Error(), s)
			}
		})
	}
}

// Rotated key files are read again once FileRefresh has passed.
func TestFileCredentialsRefresh(t *testing.T) {
	dir := t.TempDir()
	ak, sk := filepath.Join(dir, "ak"), filepath.Join(dir, "sk")
	require.NoError(t, os.WriteFile(ak, []byte("AK1"), 0o600))
	require.NoError(t, os.WriteFile(sk, []byte("SK1"), 0o600))
	p := &fileProvider{access: ak, secret: sk}
	c := credentials.New(p)
	v, err := c.GetWithContext(nil)
	require.NoError(t, err)
	assert.Equal(t, "SK1", v.SecretAccessKey)
	require.False(t, p.IsExpired())

	require.NoError(t, os.WriteFile(sk, []byte("SK2"), 0o600))
	v, err = c.GetWithContext(nil)
	require.NoError(t, err)
	assert.Equal(t, "SK1", v.SecretAccessKey, "cached until the refresh")
	p.mu.Lock()
	p.read = p.read.Add(-2 * FileRefresh)
	p.mu.Unlock()
	v, err = c.GetWithContext(nil)
	require.NoError(t, err)
	assert.Equal(t, "SK2", v.SecretAccessKey)
}

func TestResolverErrorsMatchErrCredentials(t *testing.T) {
	boom := errors.New("secret lookup: forbidden")
	c := Credentials{Source: SourceSecret, Secret: "ns/name"}
	_, err := c.resolve(context.Background(), "eu", SecretResolverFunc(func(context.Context, string, string) (*credentials.Credentials, error) {
		return nil, boom
	}), AnySource())
	require.ErrorIs(t, err, ErrCredentials)
	require.ErrorIs(t, err, boom)
}

// TestKeyFileCheckedAtRead: a key file whose symbolic link was turned
// elsewhere after validation is refused when it is read, its content
// never returned.
func TestKeyFileCheckedAtRead(t *testing.T) {
	allowed, other := t.TempDir(), t.TempDir()
	good := filepath.Join(allowed, "secret-v1")
	require.NoError(t, os.WriteFile(good, []byte("s1"), 0o600))
	outside := filepath.Join(other, "password")
	require.NoError(t, os.WriteFile(outside, []byte("CANARY"), 0o600))
	link := filepath.Join(allowed, "secret")
	require.NoError(t, os.Symlink(good, link))
	c := Credentials{Source: SourceFiles, SecretKeyFile: link}
	sources := CredentialSources{Dirs: []string{allowed}}
	require.NoError(t, sources.check(c))
	creds, err := c.resolve(context.Background(), "eu", nil, sources)
	require.NoError(t, err)
	v, err := creds.GetWithContext(nil)
	require.NoError(t, err)
	require.Equal(t, "s1", v.SecretAccessKey)

	require.NoError(t, os.Remove(link))
	require.NoError(t, os.Symlink(outside, link))
	creds, err = c.resolve(context.Background(), "eu", nil, sources)
	require.NoError(t, err)
	_, err = creds.GetWithContext(nil)
	require.ErrorIs(t, err, ErrCredentials)
	require.NotContains(t, err.Error(), "CANARY")
}

// TestAWSFilesCheckedAtRead: AWS shared files whose symbolic link was
// turned elsewhere after validation are refused when they are read (the
// keys and the config file's region), their content never returned.
func TestAWSFilesCheckedAtRead(t *testing.T) {
	allowed, other := t.TempDir(), t.TempDir()
	write := func(dir, name, content string) string {
		f := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(f, []byte(content), 0o600))
		return f
	}
	goodCreds := write(allowed, "credentials-v1", "[default]\naws_access_key_id = a1\naws_secret_access_key = s1\n")
	goodConfig := write(allowed, "config-v1", "[default]\nregion = eu-west-1\n")
	badCreds := write(other, "credentials", "[default]\naws_access_key_id = CANARYID\naws_secret_access_key = CANARY\n")
	badConfig := write(other, "config", "[default]\nregion = CANARY-1\n")
	credsLink, configLink := filepath.Join(allowed, "credentials"), filepath.Join(allowed, "config")
	require.NoError(t, os.Symlink(goodCreds, credsLink))
	require.NoError(t, os.Symlink(goodConfig, configLink))

	c := Credentials{Source: SourceAWSFiles, AWSCredentialsFile: credsLink, AWSConfigFile: configLink}
	sources := CredentialSources{Dirs: []string{allowed}}
	require.NoError(t, sources.check(c))
	creds, err := c.resolve(context.Background(), "eu", nil, sources)
	require.NoError(t, err)
	v, err := creds.GetWithContext(nil)
	require.NoError(t, err)
	require.Equal(t, "s1", v.SecretAccessKey)
	region, err := c.awsRegion(sources)
	require.NoError(t, err)
	require.Equal(t, "eu-west-1", region)

	for link, target := range map[string]string{credsLink: badCreds, configLink: badConfig} {
		require.NoError(t, os.Remove(link))
		require.NoError(t, os.Symlink(target, link))
	}
	creds, err = c.resolve(context.Background(), "eu", nil, sources)
	require.NoError(t, err)
	v, err = creds.GetWithContext(nil)
	require.ErrorIs(t, err, ErrCredentials)
	require.NotContains(t, err.Error(), "CANARY")
	require.Empty(t, v.SecretAccessKey)
	region, err = c.awsRegion(sources)
	require.ErrorIs(t, err, ErrCredentials)
	require.Empty(t, region)
	require.NotContains(t, err.Error(), "CANARY")
}
