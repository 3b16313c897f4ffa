package s3_test

import (
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

func TestOptionsValidate(t *testing.T) {
	valid := s3.Options{Bucket: "backups"}
	require.NoError(t, valid.Validate())

	pemData := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	tests := []struct {
		name string
		mod  func(*s3.Options)
		want string // substring of the error; "" means valid
	}{
		{"defaults", func(*s3.Options) {}, ""},
		{"minio endpoint", func(o *s3.Options) { o.Endpoint = "127.0.0.1:9000"; o.Insecure = true; o.BucketLookup = s3.LookupPath }, ""},
		{"ipv6 endpoint", func(o *s3.Options) { o.Endpoint = "[::1]:9000" }, ""},
		{"host endpoint", func(o *s3.Options) { o.Endpoint = "s3.eu-central-1.amazonaws.com" }, ""},
		{"lookups", func(o *s3.Options) { o.BucketLookup = s3.LookupDNS }, ""},
		{"part size bounds", func(o *s3.Options) { o.PartSize = s3.MinPartSize }, ""},
		{"sse-kms default key", func(o *s3.Options) { o.Encryption = s3.SSE{Mode: s3.SSEKMS} }, ""},
		{"no bucket", func(o *s3.Options) { o.Bucket = "" }, "bucket is required"},
		{"bad bucket", func(o *s3.Options) { o.Bucket = "x" }, `bucket "x"`},
		{"scheme", func(o *s3.Options) { o.Endpoint = "https://s3.amazonaws.com" }, "without a scheme"},
		{"path", func(o *s3.Options) { o.Endpoint = "host/path" }, "host[:port] only"},
		{"user info", func(o *s3.Options) { o.Endpoint = "key:secret@host" }, "host[:port] only"},
		{"bad port", func(o *s3.Options) { o.Endpoint = "host:99999" }, "bad port"},
		{"empty port", func(o *s3.Options) { o.Endpoint = "host:" }, "empty port"},
		{"lookup", func(o *s3.Options) { o.BucketLookup = "vhost" }, "unknown bucket lookup"},
		{"sse mode", func(o *s3.Options) { o.Encryption.Mode = "SSE-C" }, "unknown encryption mode"},
		{"kms key without kms", func(o *s3.Options) { o.Encryption = s3.SSE{Mode: s3.SSES3, KMSKeyID: "k"} }, "without SSE-KMS"},
		{"small parts", func(o *s3.Options) { o.PartSize = s3.MinPartSize - 1 }, "part size"},
		{"huge parts", func(o *s3.Options) { o.PartSize = s3.MaxPartSize + 1 }, "part size"},
		{"negative parts in flight", func(o *s3.Options) { o.PartsInFlight = -1 }, "parts in flight"},
		{"negative abort timeout", func(o *s3.Options) { o.AbortTimeout = -time.Second }, "abort timeout"},
		{"negative retries", func(o *s3.Options) { o.MaxRetries = -1 }, "max retries"},
		{"pem without certificate", func(o *s3.Options) { o.CACertPEM = []byte("nothing") }, "no certificate"},
		{"ca with transport", func(o *s3.Options) { o.CACertFile = "/ca.pem"; o.Transport = http.DefaultTransport }, "exclusive"},
		{"ca with http", func(o *s3.Options) { o.CACertPEM = pemData; o.Insecure = true }, "plain http"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := valid
			tc.mod(&o)
			err := o.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
			_, err = s3.New(o)
			require.ErrorContains(t, err, tc.want, "New validates too")
		})
	}

	// Every problem is reported at once.
	err := s3.Options{PartSize: 1, PartsInFlight: -1}.Validate()
	require.ErrorContains(t, err, "bucket is required")
	require.ErrorContains(t, err, "part size")
	require.ErrorContains(t, err, "parts in flight")
}

func TestStringsHideCredentials(t *testing.T) {
	const canary = "CANARY-secret-3f9a"
	opts := s3.Options{
		Endpoint:    "minio.example:9000",
		Bucket:      "backups",
		Credentials: s3.StaticCredentials("AKIDEXAMPLE", canary, canary+"token"),
		Encryption:  s3.SSE{Mode: s3.SSEKMS, KMSKeyID: "backup-key"},
		Transport:   http.DefaultTransport,
	}
	b, err := s3.New(opts)
	require.NoError(t, err)
	for _, s := range []string{
		opts.String(), opts.GoString(), b.String(), b.GoString(),
		fmt.Sprintf("%v|%+v|%#v|%s", opts, opts, opts, opts),
		fmt.Sprintf("%v|%+v|%#v|%s", &opts, &opts, &opts, &opts),
		fmt.Sprintf("%v|%+v|%#v|%s", b, b, b, b),
		fmt.Sprintf("%v", []any{opts, b}),
	} {
		assert.NotContains(t, s, canary)
	}
	assert.Contains(t, opts.String(), `Bucket: "backups"`)
	assert.Contains(t, opts.String(), "Credentials: <set>")
	assert.Contains(t, opts.String(), `SSE-KMS key "backup-key"`)
	assert.Contains(t, b.String(), "minio.example:9000/backups")
}

func TestCredentialConstructors(t *testing.T) {
	get := func(c *credentials.Credentials) credentials.Value {
		t.Helper()
		v, err := c.GetWithContext(nil)
		require.NoError(t, err)
		return v
	}

	v := get(s3.StaticCredentials("ak", "sk", "tok"))
	assert.Equal(t, "ak", v.AccessKeyID)
	assert.Equal(t, "sk", v.SecretAccessKey)
	assert.Equal(t, "tok", v.SessionToken)

	dir := t.TempDir()
	file := filepath.Join(dir, "credentials")
	require.NoError(t, os.WriteFile(file, []byte(
		"[default]\naws_access_key_id = default-ak\naws_secret_access_key = default-sk\n"+
			"[backup]\naws_access_key_id = backup-ak\naws_secret_access_key = backup-sk\n"), 0o600))
	assert.Equal(t, "backup-ak", get(s3.FileCredentials(file, "backup")).AccessKeyID)
	assert.Equal(t, "default-ak", get(s3.FileCredentials(file, "")).AccessKeyID)

	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY",
		"AWS_SESSION_TOKEN", "MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD", "MINIO_ACCESS_KEY", "MINIO_SECRET_KEY"} {
		t.Setenv(k, "")
	}
	t.Setenv("MINIO_ROOT_USER", "minio-ak")
	t.Setenv("MINIO_ROOT_PASSWORD", "minio-sk")
	assert.Equal(t, "minio-ak", get(s3.EnvCredentials()).AccessKeyID)
	t.Setenv("AWS_ACCESS_KEY_ID", "env-ak")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "env-sk")
	assert.Equal(t, "env-ak", get(s3.EnvCredentials()).AccessKeyID, "AWS variables come first")

	// The chain takes the first source with a key, skipping empty ones.
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("MINIO_ROOT_USER", "")
	chain := s3.ChainCredentials(s3.EnvCredentials(), nil, s3.FileCredentials(filepath.Join(dir, "missing"), ""),
		s3.FileCredentials(file, "backup"), s3.StaticCredentials("static-ak", "static-sk", ""))
	assert.Equal(t, "backup-ak", get(chain).AccessKeyID)

	// With no source at all, requests go anonymous.
	v = get(s3.ChainCredentials(s3.EnvCredentials()))
	assert.Empty(t, v.AccessKeyID)
	assert.Equal(t, credentials.SignatureAnonymous, v.SignerType)

	// The default chain and the IAM source build without touching the network.
	require.NotNil(t, s3.DefaultCredentials())
	require.NotNil(t, s3.IAMCredentials(""))
}

// A store behind a TLS certificate of a private authority is reachable
// only once that authority is trusted, through PEM bytes or a file.
func TestCustomCertificateAuthority(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Answer every HEAD as S3 does for a missing key.
		w.Header().Set("x-minio-error-code", "NoSuchKey")
		w.WriteHeader(http.StatusNotFound)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	srv.StartTLS()
	defer srv.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, caPEM, 0o600))

	base := s3.Options{
		Endpoint:     srv.Listener.Addr().String(),
		Bucket:       "backups",
		Region:       "us-east-1",
		BucketLookup: s3.LookupPath,
		Credentials:  s3.StaticCredentials("ak", "sk", ""),
		MaxRetries:   1,
	}
	stat := func(o s3.Options) error {
		b, err := s3.New(o)
		require.NoError(t, err)
		_, err = b.Stat(testCtx(t), "k")
		return err
	}

	err := stat(base)
	require.Error(t, err)
	require.NotErrorIs(t, err, storage.ErrNotFound, "untrusted server must not be reached")

	withPEM := base
	withPEM.CACertPEM = caPEM
	require.ErrorIs(t, stat(withPEM), storage.ErrNotFound)

	withFile := base
	withFile.CACertFile = caFile
	require.ErrorIs(t, stat(withFile), storage.ErrNotFound)

	missing := base
	missing.CACertFile = filepath.Join(t.TempDir(), "none.pem")
	_, err = s3.New(missing)
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestPartsWithin(t *testing.T) {
	for _, c := range []struct {
		budget int64
		size   int64
		parts  int
	}{
		{0, s3.MinPartSize, 2},
		{10 << 20, s3.MinPartSize, 2},
		{15 << 20, s3.MinPartSize, 3},
		{16 << 20, s3.DefaultPartSize, 2},
		{32 << 20, s3.DefaultPartSize, 4},
		{100 << 20, s3.DefaultPartSize, 12},
	} {
		size, parts := s3.PartsWithin(c.budget)
		if size != c.size || parts != c.parts {
			t.Errorf("PartsWithin(%d) = %d, %d; want %d, %d", c.budget, size, parts, c.size, c.parts)
		}
	}
}
