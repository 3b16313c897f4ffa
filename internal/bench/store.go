//go:build !benchlean

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// A remote store is MinIO as a distant S3 endpoint looks to a client:
// HTTPS with a certificate of a private authority, and a round-trip time.
// The bench puts a proxy of its own in front of the loopback MinIO: it
// terminates TLS with a certificate generated for the run, holds every
// request half the store's RTT before passing it on and every answer half
// the RTT before returning it, and speaks plain HTTP to MinIO. The client
// (the mode's process) does all of a real client's TLS work; the server's
// side of TLS and the waiting are the proxy's, in the bench's own
// process, whose CPU is counted neither as the mode's nor as others'.
// Bandwidth is not limited: the delays model the RTT of each request,
// not a congested link.

// startStores starts a proxy for each store that a mode of ms uses, with
// one certificate for all of them written to dir, and returns them by
// store name.
func startStores(ctx context.Context, ms []mode, target, dir string) (map[string]*storeProxy, error) {
	out := map[string]*storeProxy{}
	var cert *tls.Certificate
	var caFile string
	for _, m := range ms {
		if m.store == "" || out[m.store] != nil {
			continue
		}
		st, ok := findStore(m.store)
		if !ok {
			return nil, fmt.Errorf("mode %s: unknown store %q", m.name, m.store)
		}
		if cert == nil {
			var err error
			if cert, caFile, err = writeCertificate(dir); err != nil {
				return nil, err
			}
		}
		p, err := startStoreProxy(ctx, st, target, cert, caFile)
		if err != nil {
			return nil, err
		}
		out[m.store] = p
	}
	return out, nil
}

// storeProxy is one remote store's proxy.
type storeProxy struct {
	store  remoteStore
	addr   string
	caFile string
	srv    *http.Server
}

func startStoreProxy(_ context.Context, st remoteStore, target string, cert *tls.Certificate, caFile string) (*storeProxy, error) {
	u := &url.URL{Scheme: "http", Host: target}
	half := st.rtt / 2
	wait := func(ctx context.Context) error {
		if half <= 0 {
			return nil
		}
		t := time.NewTimer(half)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host // the client signed this host
		},
		FlushInterval: -1,
		// The answer waits its half of the RTT before its headers go back.
		ModifyResponse: func(resp *http.Response) error { return wait(resp.Request.Context()) },
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if wait(r.Context()) != nil {
			return
		}
		rp.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: time.Minute,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	return &storeProxy{store: st, addr: ln.Addr().String(), caFile: caFile, srv: srv}, nil
}

func (p *storeProxy) close() { _ = p.srv.Close() }

// writeCertificate generates a self-signed certificate for 127.0.0.1 and
// localhost, which is its own authority, and writes it to dir/ca.pem.
func writeCertificate(dir string) (*tls.Certificate, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "etcdbackup-bench store"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, "", err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, "", err
	}
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		return nil, "", err
	}
	// Absolute: the CLI reads it from a config file elsewhere, and resolves
	// a relative caFile against the config's directory.
	path, err := filepath.Abs(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(path, certPEM, 0o600); err != nil {
		return nil, "", fmt.Errorf("write certificate: %w", err)
	}
	return &cert, path, nil
}
