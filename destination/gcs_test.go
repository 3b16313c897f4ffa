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
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/gcp"

	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/gcstest"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/gcs"
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
	r := newRegistry(t, destination.Options{Drivers: []blob.Driver{gcs.Driver()}, Secrets: destination.StaticSecrets{"gcs": {AccessKey: "backup@test.iam.gserviceaccount.com", SecretKey: key}},
		CredentialSources: destination.AnySource()})
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
	r2 := newRegistry(t, destination.Options{Drivers: []blob.Driver{gcs.Driver()}})
	_, err = r2.Add(ctx, destination.Spec{Name: "bare", URL: "gs://some-bucket"})
	require.NoError(t, err)
	st, err = r2.Check(ctx, "bare")
	require.NoError(t, err)
	require.Equal(t, destination.ReasonAuth, st.Reason, "%+v", st)
	require.False(t, strings.Contains(fmt.Sprint(st), key[:40]))
}

// TestCloudDriversAreExplicit: a registry links no cloud SDK by itself. A
// gs:// or azblob:// destination whose driver the host did not give is
// refused with ErrNoDriver, naming the package to import; with the driver
// it is accepted.
func TestCloudDriversAreExplicit(t *testing.T) {
	ctx := testCtx(t)
	r := newRegistry(t, destination.Options{Secrets: destination.StaticSecrets{"k": {AccessKey: "a", SecretKey: "b"}}})
	for url, pkg := range map[string]string{
		"gs://bucket":                     "storage/blob/gcs",
		"azblob://container":              "storage/blob/azure",
		"azblob://container-b?account=a1": "storage/blob/azure",
	} {
		_, err := r.Add(ctx, destination.Spec{Name: "cloud", URL: url})
		require.ErrorIs(t, err, destination.ErrNoDriver, url)
		require.ErrorIs(t, err, destination.ErrInvalidSpec, url)
		require.ErrorContains(t, err, "github.com/etcdbackup/etcdbackup/"+pkg, url)
		_, err = r.Add(ctx, destination.Spec{Name: "keyed", URL: url, Credentials: destination.Credentials{Source: destination.SourceSecret, Secret: "k"}})
		require.ErrorIs(t, err, destination.ErrNoDriver, url)
	}
	withGCS := newRegistry(t, destination.Options{Drivers: []blob.Driver{gcs.Driver()}})
	_, err := withGCS.Add(ctx, destination.Spec{Name: "cloud", URL: "gs://bucket"})
	require.NoError(t, err)
	_, err = withGCS.Add(ctx, destination.Spec{Name: "other", URL: "azblob://container"})
	require.ErrorIs(t, err, destination.ErrNoDriver, "only the drivers given")

	_, err = destination.NewRegistry(destination.Options{Drivers: []blob.Driver{gcs.Driver(), gcs.Driver()}})
	require.Error(t, err, "a driver given twice")
	_, err = destination.NewRegistry(destination.Options{Drivers: []blob.Driver{{Scheme: "s3"}}})
	require.Error(t, err, "drivers are for the clouds gocloud opens")
}

// TestDestinationLinksNoCloudSDK: a program that imports destination and
// storage/s3 only links no Google Cloud or Azure package.
func TestDestinationLinksNoCloudSDK(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps",
		"github.com/etcdbackup/etcdbackup/destination", "github.com/etcdbackup/etcdbackup/storage/s3").Output()
	require.NoError(t, err)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/minio/minio-go/v7", "the listing is of the program's packages")
	for _, p := range deps {
		require.False(t, strings.HasPrefix(p, "cloud.google.com/") || strings.HasPrefix(p, "github.com/Azure/") ||
			strings.HasPrefix(p, "gocloud.dev/blob/gcsblob") || strings.HasPrefix(p, "gocloud.dev/blob/azureblob"),
			"%s is linked", p)
	}
	out, err = exec.Command("go", "list", "-deps", "github.com/etcdbackup/etcdbackup/storage/blob/gcs").Output()
	require.NoError(t, err)
	require.Contains(t, string(out), "cloud.google.com/", "the check can fail: the gs driver links the SDK")
}

// TestGCSEndpointWithoutCredentials: a gs:// destination without
// credentials whose URL names an endpoint talks to that endpoint, never to
// Google's service, and sends it none of the process's Google credentials
// (Application Default Credentials from a key file whose token endpoint
// counts its requests).
func TestGCSEndpointWithoutCredentials(t *testing.T) {
	ctx := testCtx(t)
	srv := gcstest.Start(t)
	var tokens atomic.Int32
	tokenServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tokens.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"ya29.process-token","token_type":"Bearer","expires_in":3600}`)
	}))
	t.Cleanup(tokenServer.Close)
	keyFile := filepath.Join(t.TempDir(), "adc.json")
	require.NoError(t, os.WriteFile(keyFile, []byte(serviceAccountKey(t, tokenServer.URL)), 0o600))
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", keyFile)
	t.Setenv("STORAGE_EMULATOR_HOST", "")

	// A recording proxy in front of the emulator: the endpoint the spec names.
	var requests, authorized atomic.Int32
	target := &url.URL{Scheme: "http", Host: srv.Addr()}
	rp := httputil.NewSingleHostReverseProxy(target)
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.Header.Get("Authorization") != "" {
			authorized.Add(1)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(endpoint.Close)

	bucket := srv.NewBucket(t)
	r := newRegistry(t, destination.Options{Drivers: []blob.Driver{gcs.Driver()}})
	d, err := r.Add(ctx, destination.Spec{Name: "private",
		URL: "gs://" + bucket + "/seed?endpoint=" + strings.TrimPrefix(endpoint.URL, "http://") + "&insecure=true"})
	require.NoError(t, err)
	st, err := r.Check(ctx, "private")
	require.NoError(t, err)
	require.True(t, st.Available(), "%+v", st)
	require.NoError(t, d.Put(ctx, "prod-a/x", strings.NewReader("x"), nil))

	direct, err := gcsblob.OpenBucket(ctx, new(gcp.HTTPClient), bucket, &gcsblob.Options{ClientOptions: srv.ClientOptions()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = direct.Close() })
	ok, err := direct.Exists(ctx, "seed/prod-a/x")
	require.NoError(t, err)
	require.True(t, ok, "the object is at the endpoint the URL names")
	require.Positive(t, requests.Load())
	require.Zero(t, authorized.Load(), "no credentials were sent to the endpoint")
	require.Zero(t, tokens.Load(), "the process's credentials were not used")

	// The driver refuses an endpoint it would have to send credentials to.
	_, err = gcs.URLOpener().OpenBucketURL(ctx, must(url.Parse("gs://"+bucket+"?endpoint="+url.QueryEscape(endpoint.URL))))
	require.ErrorContains(t, err, "anonymous=true")
}
