//go:build !benchlean

package main

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStoreProxy: the remote store's proxy speaks HTTPS with a certificate
// its CA file vouches for, passes requests on with the host the client
// signed, and holds each exchange for the store's RTT.
func TestStoreProxy(t *testing.T) {
	var host string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host = r.Host
		_, _ = io.Copy(w, r.Body)
	}))
	defer backend.Close()
	dir := t.TempDir()
	cert, caFile, err := writeCertificate(dir)
	if err != nil {
		t.Fatal(err)
	}
	st := remoteStore{name: "test", rtt: 60 * time.Millisecond}
	p, err := startStoreProxy(t.Context(), st, strings.TrimPrefix(backend.URL, "http://"), cert, caFile)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()

	pem, err := os.ReadFile(p.caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatal("no certificate in the CA file")
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	defer client.CloseIdleConnections()
	for range 2 { // the second on a kept connection: the RTT is per request
		start := time.Now()
		resp, err := client.Post("https://"+p.addr+"/bucket/key", "text/plain", strings.NewReader("part"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if elapsed := time.Since(start); elapsed < st.rtt {
			t.Errorf("exchange took %v, less than the store's RTT %v", elapsed, st.rtt)
		}
		if string(body) != "part" || host != p.addr {
			t.Errorf("body %q, host %q; want the request's body and host %s", body, host, p.addr)
		}
	}
	// Go's TLS server answers plain HTTP with a 400 of its own.
	if resp, err := http.Get("http://" + p.addr + "/"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("the proxy served plain HTTP: %s", resp.Status)
		}
	}
}

// TestCertificatePathAbsolute names the CA file by an absolute path when
// the bench's -work is relative (as make bench's bench-out is): the CLI
// resolves a config's relative caFile against the config's directory.
func TestCertificatePathAbsolute(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.Mkdir("run", 0o700); err != nil {
		t.Fatal(err)
	}
	_, caFile, err := writeCertificate("run")
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(caFile) {
		t.Errorf("CA file %q is relative", caFile)
	}
	if _, err := os.Stat(caFile); err != nil {
		t.Error(err)
	}
}
