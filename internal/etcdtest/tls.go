package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
)

// TLSFiles names the PEM files of a certificate, its key and the CA that
// signed it.
type TLSFiles struct {
	CAFile   string
	CertFile string
	KeyFile  string
}

// TLSInfo returns the files as etcd's transport.TLSInfo.
func (f TLSFiles) TLSInfo() transport.TLSInfo {
	return transport.TLSInfo{TrustedCAFile: f.CAFile, CertFile: f.CertFile, KeyFile: f.KeyFile}
}

// CA is a certificate authority for tests, kept in a temporary directory.
type CA struct {
	// CertFile is the CA's certificate in PEM.
	CertFile string

	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	dir    string
	serial atomic.Int64
}

// NewCA creates a CA valid from an hour ago for a day.
func NewCA(tb testing.TB) *CA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("etcdtest: ca key: %v", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "etcdtest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatalf("etcdtest: ca certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("etcdtest: ca certificate: %v", err)
	}
	ca := &CA{cert: cert, key: key, dir: tb.TempDir()}
	ca.serial.Store(1)
	ca.CertFile = filepath.Join(ca.dir, "ca.crt")
	writePEM(tb, ca.CertFile, "CERTIFICATE", der)
	return ca
}

// CertOptions describes a certificate to issue. Zero values mean: common
// name "etcdtest", SANs "localhost" and 127.0.0.1, valid from an hour ago
// for a day.
type CertOptions struct {
	CommonName  string
	DNSNames    []string
	IPAddresses []net.IP
	NotBefore   time.Time
	NotAfter    time.Time
}

// Issue signs a certificate usable both by a server and by a client, and
// returns its files with the CA's.
func (ca *CA) Issue(tb testing.TB, opts CertOptions) TLSFiles {
	tb.Helper()
	now := time.Now()
	if opts.CommonName == "" {
		opts.CommonName = "etcdtest"
	}
	if opts.DNSNames == nil && opts.IPAddresses == nil {
		opts.DNSNames = []string{"localhost"}
		opts.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	if opts.NotBefore.IsZero() {
		opts.NotBefore = now.Add(-time.Hour)
	}
	if opts.NotAfter.IsZero() {
		opts.NotAfter = now.Add(24 * time.Hour)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("etcdtest: key: %v", err)
	}
	serial := ca.serial.Add(1)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: opts.CommonName},
		DNSNames:     opts.DNSNames,
		IPAddresses:  opts.IPAddresses,
		NotBefore:    opts.NotBefore,
		NotAfter:     opts.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatalf("etcdtest: certificate: %v", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatalf("etcdtest: key: %v", err)
	}
	base := filepath.Join(ca.dir, opts.CommonName+"-"+big.NewInt(serial).String())
	files := TLSFiles{CAFile: ca.CertFile, CertFile: base + ".crt", KeyFile: base + ".key"}
	writePEM(tb, files.CertFile, "CERTIFICATE", der)
	writePEM(tb, files.KeyFile, "EC PRIVATE KEY", keyDER)
	return files
}

func writePEM(tb testing.TB, path, typ string, der []byte) {
	tb.Helper()
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		tb.Fatalf("etcdtest: write %s: %v", path, err)
	}
}
