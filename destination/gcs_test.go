package destination_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/gcstest"
)

// serviceAccountKey returns a service account's JSON key whose tokens come
// from tokenURI.
func serviceAccountKey(t *testing.T, tokenURI string) string {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: must(x509.MarshalPKCS8PrivateKey(key))})
	raw, err := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "test", "private_key_id": "k1", "private_key": string(pemKey),
		"client_email": "backup@test.iam.gserviceaccount.com", "client_id": "1", "token_uri": tokenURI,
	})
	require.NoError(t, err)
	return string(raw)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestGCSServiceAccountKey: a gs:// destination takes a service account's
// JSON key of its own from a secret, a file or an environment variable;
// its requests carry the token that key obtains (fake-gcs-server, and a
// token endpoint on loopback). Without any credentials the failure is
// classified auth, and the key never appears in a status.
func TestGCSServiceAccountKey(t *testing.T) {
	ctx := testCtx(t)
	srv := gcstest.Start(t)
	var tokens atomic.Int32
	tokenServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		if r.Form.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" || r.Form.Get("assertion") == "" {
			http.Error(w, "bad grant", http.StatusBadRequest)
			return
		}
		tokens.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"ya29.test-token","token_type":"Bearer","expires_in":3600}`)
	}))
	t.Cleanup(tokenServer.Close)
	key := serviceAccountKey(t, tokenServer.URL)
	keyFile := filepath.Join(t.TempDir(), "key.json")
	require.NoError(t, os.WriteFile(keyFile, []byte(key), 0o600))
	t.Setenv("GCS_KEY_JSON", key)
	endpoint := strings.TrimSuffix(strings.TrimPrefix(srv.Endpoint(), "http://"), "/storage/v1/")
	gsURL := func(bucket string) string { return "gs://" + bucket + "/seed?endpoint=" + endpoint + "&insecure=true" }

	// A secret holds the key as a destination's keys: the service
	// account's email as the access key, its JSON key as the secret key.
	r := newRegistry(t, destination.Options{Secrets: destination.StaticSecrets{"gcs": {AccessKey: "backup@test.iam.gserviceaccount.com", SecretKey: key}}})
	for name, creds := range map[string]destination.Credentials{
		"from-secret": {Source: destination.SourceSecret, Secret: "gcs"},
		"from-file":   {Source: destination.SourceFiles, SecretKeyFile: keyFile},
		"from-env":    {Source: destination.SourceEnv, SecretKeyEnv: "GCS_KEY_JSON"},
	} {
		t.Run(name, func(t *testing.T) {
			before := tokens.Load()
			d, err := r.Add(ctx, destination.Spec{Name: name, URL: gsURL(srv.NewBucket(t)), Credentials: creds})
			require.NoError(t, err)
			st, err := r.Check(ctx, name)
			require.NoError(t, err)
			require.True(t, st.Available(), "%+v", st)
			require.NoError(t, d.Put(ctx, "prod-a/x", strings.NewReader("x"), nil))
			require.Greater(t, tokens.Load(), before, "the destination's own key obtained the token")
		})
	}

	// A key that is no JSON key, or a file naming an access key too.
	_, err := r.Add(ctx, destination.Spec{Name: "bad", URL: gsURL(srv.NewBucket(t)), Credentials: destination.Credentials{Source: destination.SourceFiles, AccessKeyFile: keyFile, SecretKeyFile: keyFile}})
	require.ErrorIs(t, err, destination.ErrInvalidSpec)
	notJSON := filepath.Join(t.TempDir(), "not.json")
	require.NoError(t, os.WriteFile(notJSON, []byte("CANARY-not-a-key"), 0o600))
	_, err = r.Add(ctx, destination.Spec{Name: "garbled", URL: gsURL(srv.NewBucket(t)), Credentials: destination.Credentials{Source: destination.SourceFiles, SecretKeyFile: notJSON}})
	require.NoError(t, err)
	st, err := r.Check(ctx, "garbled")
	require.NoError(t, err)
	require.Equal(t, destination.ReasonAuth, st.Reason)
	require.NotContains(t, st.Message, "CANARY")

	// No credentials at all, no emulator: auth, not error.
	t.Setenv("STORAGE_EMULATOR_HOST", "")
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(t.TempDir(), "missing.json"))
	r2 := newRegistry(t, destination.Options{})
	_, err = r2.Add(ctx, destination.Spec{Name: "bare", URL: "gs://some-bucket"})
	require.NoError(t, err)
	st, err = r2.Check(ctx, "bare")
	require.NoError(t, err)
	require.Equal(t, destination.ReasonAuth, st.Reason, "%+v", st)
	require.False(t, strings.Contains(fmt.Sprint(st), key[:40]))
}
