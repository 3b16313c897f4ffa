// Package gcstest runs a fake-gcs-server process, a Google Cloud Storage
// emulator speaking the JSON API, for integration tests of the gs:// driver.
//
// Start launches the binary `make tools` installed on a free loopback port
// with an in-memory backend, waits until it serves, and stops it when the
// test ends. A missing binary fails the test: integration tests in this
// module never skip.
//
//	srv := gcstest.Start(t)
//	bucket := srv.NewBucket(t)
//	b, err := gcsblob.OpenBucket(ctx, new(gcp.HTTPClient), bucket,
//		&gcsblob.Options{ClientOptions: srv.ClientOptions()})
//
// The binary is found through the ETCDBACKUP_FAKE_GCS_BIN environment
// variable, or else at .tools/bin/fake-gcs-server under the module root.
package gcstest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/api/option"

	"github.com/etcdbackup/etcdbackup/internal/servertest"
)

// BinEnv names the environment variable that overrides the binary's
// location.
const BinEnv = "ETCDBACKUP_FAKE_GCS_BIN"

const startTimeout = 60 * time.Second

// Server is a running fake-gcs-server. Its methods are safe for concurrent
// use.
type Server struct {
	addr    string
	buckets atomic.Int64
}

// Start launches the emulator and registers its shutdown with tb.Cleanup.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin := servertest.Binary(tb, "gcstest", BinEnv, filepath.Join(".tools", "bin", "fake-gcs-server"))
	s := &Server{}
	s.addr = servertest.StartOnFreePort(tb, "gcstest", startTimeout, func(addr string) *exec.Cmd {
		return exec.Command(bin,
			"-scheme", "http",
			"-host", "127.0.0.1",
			"-port", servertest.Port(addr),
			"-backend", "memory",
			"-public-host", addr,
			"-external-url", "http://"+addr,
			"-log-level", "error")
	}, func(addr string) func() error {
		return servertest.HTTPReady("http://" + addr + "/storage/v1/b")
	})
	return s
}

// Addr returns the emulator's host:port.
func (s *Server) Addr() string { return s.addr }

// Endpoint returns the JSON API's base URL, as storage clients take it.
func (s *Server) Endpoint() string { return "http://" + s.addr + "/storage/v1/" }

// ClientOptions returns the options that point a Cloud Storage client at the
// emulator, without credentials.
func (s *Server) ClientOptions() []option.ClientOption {
	return []option.ClientOption{option.WithEndpoint(s.Endpoint()), option.WithoutAuthentication()}
}

// NewBucket creates a bucket with a name unique to this call and returns
// the name.
func (s *Server) NewBucket(tb testing.TB) string {
	tb.Helper()
	name := fmt.Sprintf("test-%03d", s.buckets.Add(1))
	body, err := json.Marshal(map[string]string{"name": name})
	if err != nil {
		tb.Fatalf("gcstest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.Endpoint()+"b?project=test", bytes.NewReader(body))
	if err != nil {
		tb.Fatalf("gcstest: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		tb.Fatalf("gcstest: create bucket %s: %v", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("gcstest: create bucket %s: %s", name, resp.Status)
	}
	return name
}
