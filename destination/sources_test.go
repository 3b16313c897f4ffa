package destination_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/destination"
)

// TestCredentialsAllowedByHost: the files, environment variables and IAM
// endpoint a spec may name are the host's choice, none by default. A spec
// naming others is refused before anything is read or sent: a recording
// endpoint the spec names receives nothing.
func TestCredentialsAllowedByHost(t *testing.T) {
	ctx := testCtx(t)
	var requests atomic.Int32
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.Error(w, "no", http.StatusForbidden)
	}))
	t.Cleanup(endpoint.Close)
	url := "s3://bkt/p?endpoint=" + strings.TrimPrefix(endpoint.URL, "http://") + "&insecure=true"

	allowed, other := t.TempDir(), t.TempDir()
	write := func(dir, name string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("CANARY-"+name), 0o600))
		return p
	}
	access, secret, token := write(allowed, "access"), write(allowed, "secret"), write(other, "token")
	link := filepath.Join(allowed, "link")
	require.NoError(t, os.Symlink(token, link))
	t.Setenv("ETCDBACKUP_TEST_ACCESS", "a")
	t.Setenv("ETCDBACKUP_TEST_SECRET", "b")
	t.Setenv("UNRELATED_PASSWORD", "CANARY-password")

	files := func(tok string) destination.Credentials {
		return destination.Credentials{Source: destination.SourceFiles, AccessKeyFile: access, SecretKeyFile: secret, SessionTokenFile: tok}
	}
	env := func(secretVar string) destination.Credentials {
		return destination.Credentials{Source: destination.SourceEnv, AccessKeyEnv: "ETCDBACKUP_TEST_ACCESS", SecretKeyEnv: secretVar}
	}
	iam := destination.Credentials{Source: destination.SourceIAM, IAMEndpoint: endpoint.URL}
	awsFiles := destination.Credentials{Source: destination.SourceAWSFiles, AWSCredentialsFile: token}

	closed := newRegistry(t, destination.Options{})
	for name, c := range map[string]destination.Credentials{
		"files": files(""), "token-file": files(token), "env": env("ETCDBACKUP_TEST_SECRET"), "iam": iam, "aws-files": awsFiles,
	} {
		_, err := closed.Add(ctx, destination.Spec{Name: name, URL: url, Credentials: c})
		require.ErrorIs(t, err, destination.ErrInvalidSpec, name)
		require.NotContains(t, err.Error(), "CANARY")
	}
	_, err := closed.Add(ctx, destination.Spec{Name: "standard-env", URL: url, Credentials: destination.Credentials{Source: destination.SourceEnv}})
	require.NoError(t, err, "the standard AWS variables need no permission")

	open := newRegistry(t, destination.Options{CredentialSources: destination.CredentialSources{
		Dirs: []string{allowed}, Env: []string{"ETCDBACKUP_TEST_*"}}})
	for name, c := range map[string]destination.Credentials{
		"file-elsewhere":   files(token),
		"symlink-out":      files(link),
		"dot-dot":          files(filepath.Join(allowed, "..", filepath.Base(other), "token")),
		"relative":         files("token"),
		"unrelated-var":    env("UNRELATED_PASSWORD"),
		"iam-not-enabled":  iam,
		"aws-files-beyond": awsFiles,
	} {
		_, err := open.Add(ctx, destination.Spec{Name: name, URL: url, Credentials: c})
		require.ErrorIs(t, err, destination.ErrInvalidSpec, name)
		require.NotContains(t, err.Error(), "CANARY")
	}
	require.Zero(t, requests.Load(), "nothing was sent for a refused spec")

	for name, c := range map[string]destination.Credentials{"in-dir": files(""), "allowed-vars": env("ETCDBACKUP_TEST_SECRET")} {
		_, err := open.Add(ctx, destination.Spec{Name: name, URL: strings.Replace(url, "/p?", "/"+name+"?", 1), Credentials: c})
		require.NoError(t, err, name)
	}
	withIAM := newRegistry(t, destination.Options{CredentialSources: destination.CredentialSources{IAMEndpoint: true}})
	_, err = withIAM.Add(ctx, destination.Spec{Name: "iam", URL: url, Credentials: iam})
	require.NoError(t, err)

	_, err = destination.NewRegistry(destination.Options{CredentialSources: destination.CredentialSources{Dirs: []string{"relative"}}})
	require.Error(t, err)
}
