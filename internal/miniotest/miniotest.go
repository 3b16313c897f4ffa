// Package miniotest runs a real MinIO server process for integration tests.
//
// Start launches the MinIO binary installed by `make tools` on a free
// loopback port with random root credentials and a data directory inside
// the test's temporary directory, waits until it is live and ready, and
// stops it when the test ends. A missing binary fails the test: integration
// tests in this module never skip.
//
//	srv := miniotest.Start(t)
//	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
//	client := srv.Client(t)
//
// The binary is found through the ETCDBACKUP_MINIO_BIN environment variable,
// or else at .tools/bin/minio under the module root (the directory holding
// go.mod, searched upwards from the working directory).
package miniotest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/etcdbackup/etcdbackup/internal/servertest"
	"github.com/etcdbackup/etcdbackup/storage"
)

// BinEnv names the environment variable that overrides the MinIO binary's
// location.
const BinEnv = "ETCDBACKUP_MINIO_BIN"

// KMSKeyName is the name of the single KMS key every server started by this
// package holds, so tests can use SSE-S3 and SSE-KMS with this key ID.
const KMSKeyName = "miniotest-key"

const (
	startTimeout = 60 * time.Second
	startTries   = 3
)

// BucketOptions tunes NewBucket.
type BucketOptions struct {
	// ObjectLocking creates the bucket with object lock enabled, which
	// also turns versioning on.
	ObjectLocking bool
}

// Server is a running MinIO process. Its methods are safe for concurrent
// use except Stop and Restart, which a test calls from one goroutine.
type Server struct {
	bin     string
	dataDir string
	certDir string
	addr    string // host:port of the S3 API
	console string // host:port of the console listener
	access  string
	secret  string
	kmsKey  string
	caFile  string // set when the server speaks HTTPS
	roots   *x509.CertPool

	mu        sync.Mutex
	proc      *servertest.Process
	buckets   atomic.Int64
	core      *minio.Core     // shared by NewBucket and IncompleteUploads
	transport *http.Transport // core's
}

// Start launches a MinIO server on plain HTTP and registers its shutdown
// with tb.Cleanup.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return start(tb, TLS{}, "")
}

// StartIn is Start with the server's drive in dataDir (a small file
// system, for a test of a full drive), which must exist.
func StartIn(tb testing.TB, dataDir string) *Server {
	tb.Helper()
	return start(tb, TLS{}, dataDir)
}

// TLS names the PEM files of the certificate and key a server presents and
// of the authority that signed them.
type TLS struct {
	CertFile, KeyFile, CAFile string
}

// StartTLS launches a MinIO server that speaks HTTPS only, with the given
// certificate, which must be valid for 127.0.0.1. Its helpers trust
// files.CAFile; clients must be told to (S3Options does).
func StartTLS(tb testing.TB, files TLS) *Server {
	tb.Helper()
	return start(tb, files, "")
}

func start(tb testing.TB, files TLS, dataDir string) *Server {
	tb.Helper()
	bin := servertest.Binary(tb, "miniotest", BinEnv, filepath.Join(".tools", "bin", "minio"))
	dir := tb.TempDir()
	s := &Server{
		bin:     bin,
		dataDir: filepath.Join(dir, "data"),
		certDir: filepath.Join(dir, "certs"),
		access:  "test-" + randomHex(tb, 8),
		secret:  randomHex(tb, 20),
		kmsKey:  KMSKeyName + ":" + base64.StdEncoding.EncodeToString(randomBytes(tb, 32)),
	}
	if dataDir != "" {
		s.dataDir = dataDir
	}
	for _, d := range []string{s.dataDir, s.certDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			tb.Fatalf("miniotest: %v", err)
		}
	}
	if files != (TLS{}) {
		s.installTLS(tb, files)
	}
	tb.Cleanup(func() { s.stop(tb) })

	// A free port found by listening and closing can be taken by another
	// process before MinIO binds it; try a few ports before giving up.
	var lastErr error
	for range startTries {
		s.addr, s.console = servertest.FreeAddr(tb), servertest.FreeAddr(tb)
		p, err := s.launch()
		if err == nil {
			s.proc = p
			return s
		}
		lastErr = err
		tb.Logf("miniotest: start on %s: %v\n%s", s.addr, err, p.Output())
	}
	tb.Fatalf("miniotest: start minio: %v", lastErr)
	return nil
}

// launch starts the process and waits until it is live and ready. On error
// the process is gone and its output is in the returned process.
func (s *Server) launch() (*servertest.Process, error) {
	cmd := exec.Command(s.bin, "server",
		"--quiet",
		"--address", s.addr,
		"--console-address", s.console,
		"--certs-dir", s.certDir,
		s.dataDir)
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+s.access,
		"MINIO_ROOT_PASSWORD="+s.secret,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
		"MINIO_CI_CD=on",
		"MINIO_KMS_SECRET_KEY="+s.kmsKey,
	)
	// The health endpoints can answer before the object layer is up, when
	// S3 calls still get 503 "Server not initialized yet" (seen after a
	// restart); an anonymous ListBuckets answers 403 only once it is.
	return servertest.Launch(cmd, startTimeout, servertest.HTTPSReady(s.tlsConfig(),
		s.url()+"/minio/health/live",
		s.url()+"/minio/health/ready",
		s.url()+"/"))
}

// installTLS puts the certificate where MinIO looks for it and trusts its
// authority in the server's helpers.
func (s *Server) installTLS(tb testing.TB, files TLS) {
	tb.Helper()
	ca, err := os.ReadFile(files.CAFile)
	if err != nil {
		tb.Fatalf("miniotest: %v", err)
	}
	s.roots = x509.NewCertPool()
	if !s.roots.AppendCertsFromPEM(ca) {
		tb.Fatalf("miniotest: no certificate in %s", files.CAFile)
	}
	s.caFile = files.CAFile
	for src, dst := range map[string]string{files.CertFile: "public.crt", files.KeyFile: "private.key"} {
		b, err := os.ReadFile(src)
		if err != nil {
			tb.Fatalf("miniotest: %v", err)
		}
		if err := os.WriteFile(filepath.Join(s.certDir, dst), b, 0o600); err != nil {
			tb.Fatalf("miniotest: %v", err)
		}
	}
}

// secure reports whether the server speaks HTTPS.
func (s *Server) secure() bool { return s.roots != nil }

// url returns the server's base URL.
func (s *Server) url() string {
	if s.secure() {
		return "https://" + s.addr
	}
	return "http://" + s.addr
}

// tlsConfig trusts the server's authority; nil for plain HTTP.
func (s *Server) tlsConfig() *tls.Config {
	if !s.secure() {
		return nil
	}
	return &tls.Config{RootCAs: s.roots, MinVersion: tls.VersionTLS12}
}

// CAFile returns the PEM file of the authority that signed the server's
// certificate; empty for plain HTTP.
func (s *Server) CAFile() string { return s.caFile }

func (s *Server) stop(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	s.proc.Terminate()
	s.proc = nil
	if s.transport != nil {
		s.transport.CloseIdleConnections()
	}
}

// Stop terminates the server, keeping its port and data directory so that
// Restart can bring the same server back. Requests in between fail with
// connection errors, as with an unreachable destination.
func (s *Server) Stop(tb testing.TB) {
	tb.Helper()
	s.stop(tb)
}

// Restart starts a stopped server again on the same address and data
// directory; it stops a running one first.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.stop(tb)
	s.mu.Lock()
	defer s.mu.Unlock()
	var lastErr error
	// The old process' socket may linger a moment; retry the same port.
	for range startTries {
		p, err := s.launch()
		if err == nil {
			s.proc = p
			return
		}
		lastErr = err
		tb.Logf("miniotest: restart on %s: %v\n%s", s.addr, err, p.Output())
		time.Sleep(500 * time.Millisecond)
	}
	tb.Fatalf("miniotest: restart minio: %v", lastErr)
}

// Endpoint returns the S3 API's host:port.
func (s *Server) Endpoint() string { return s.addr }

// AccessKey returns the root user's access key.
func (s *Server) AccessKey() string { return s.access }

// SecretKey returns the root user's secret key.
func (s *Server) SecretKey() string { return s.secret }

// Client returns a new client with root credentials and path-style lookup.
func (s *Server) Client(tb testing.TB) *minio.Client {
	tb.Helper()
	c, err := s.newCore(nil)
	if err != nil {
		tb.Fatalf("miniotest: %v", err)
	}
	return c.Client
}

func (s *Server) newCore(tr http.RoundTripper) (*minio.Core, error) {
	c, err := minio.NewCore(s.addr, &minio.Options{
		Creds:        credentials.NewStaticV4(s.access, s.secret, ""),
		Secure:       s.secure(),
		Region:       "us-east-1",
		BucketLookup: minio.BucketLookupPath,
		Transport:    tr,
	})
	if err != nil {
		return nil, fmt.Errorf("new minio client: %w", err)
	}
	return c, nil
}

// adminCore returns the client the server's own helpers share.
func (s *Server) adminCore() (*minio.Core, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.core == nil {
		tr, err := minio.DefaultTransport(s.secure())
		if err != nil {
			return nil, fmt.Errorf("new transport: %w", err)
		}
		if s.secure() {
			tr.TLSClientConfig = s.tlsConfig()
		}
		// No idle connection outlives a helper call, so tests that check
		// for leaked goroutines see none of this client's.
		tr.DisableKeepAlives = true
		c, err := s.newCore(tr)
		if err != nil {
			return nil, err
		}
		s.core, s.transport = c, tr
	}
	return s.core, nil
}

// NewBucket creates a bucket with a name unique to this call and returns
// the name.
func (s *Server) NewBucket(tb testing.TB, opts BucketOptions) string {
	tb.Helper()
	c, err := s.adminCore()
	if err != nil {
		tb.Fatalf("miniotest: %v", err)
	}
	name := fmt.Sprintf("test-%03d-%s", s.buckets.Add(1), randomHex(tb, 4))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = c.MakeBucket(ctx, name, minio.MakeBucketOptions{ObjectLocking: opts.ObjectLocking})
	if err != nil {
		tb.Fatalf("miniotest: make bucket %s: %v", name, err)
	}
	return name
}

// IncompleteUploads lists every unfinished multipart upload in bucket.
//
// MinIO matches a ListMultipartUploads prefix only when it is empty or an
// exact key, so this lists with an empty prefix (recursively, without a
// delimiter) and follows the markers through every page.
func (s *Server) IncompleteUploads(ctx context.Context, bucket string) ([]storage.Upload, error) {
	c, err := s.adminCore()
	if err != nil {
		return nil, err
	}
	var (
		uploads             []storage.Upload
		keyMarker, idMarker string
	)
	for {
		res, err := c.ListMultipartUploads(ctx, bucket, "", keyMarker, idMarker, "", 1000)
		if err != nil {
			return nil, fmt.Errorf("list multipart uploads of %s: %w", bucket, err)
		}
		for _, u := range res.Uploads {
			uploads = append(uploads, storage.Upload{Key: u.Key, ID: u.UploadID, Initiated: u.Initiated})
		}
		if !res.IsTruncated {
			return uploads, nil
		}
		if res.NextKeyMarker == keyMarker && res.NextUploadIDMarker == idMarker {
			return nil, fmt.Errorf("list multipart uploads of %s: truncated listing without progress", bucket)
		}
		keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIDMarker
	}
}

func randomBytes(tb testing.TB, n int) []byte {
	tb.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		tb.Fatalf("miniotest: %v", err)
	}
	return b
}

func randomHex(tb testing.TB, n int) string {
	tb.Helper()
	return hex.EncodeToString(randomBytes(tb, n))
}
