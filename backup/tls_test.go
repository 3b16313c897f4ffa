package backup_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// tlsFaultDialTimeout bounds the dial of a client whose TLS setup is
// broken. The error names the handshake's fault once a handshake has
// failed, and only a timeout before one has: a second was too short for
// one on a machine under load.
const tlsFaultDialTimeout = 5 * time.Second

// TestEtcdTLSFailsClosed: every broken TLS setup refuses to snapshot, with
// the handshake's reason in the error.
func TestEtcdTLSFailsClosed(t *testing.T) {
	ca := etcdtest.NewCA(t)
	client := ca.Issue(t, etcdtest.CertOptions{CommonName: "client"})
	good := ca.Issue(t, etcdtest.CertOptions{CommonName: "server", DNSNames: []string{"etcd.internal"}})
	expired := ca.Issue(t, etcdtest.CertOptions{CommonName: "server", DNSNames: []string{"etcd.internal"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	live := etcdtest.Start(t, etcdtest.WithClientTLS(good, true))
	stale := etcdtest.Start(t, etcdtest.WithClientTLS(expired, true))
	other := etcdtest.NewCA(t).Issue(t, etcdtest.CertOptions{})

	tlsFor := func(caFile, serverName string) *transport.TLSInfo {
		return &transport.TLSInfo{TrustedCAFile: caFile, CertFile: client.CertFile, KeyFile: client.KeyFile, ServerName: serverName}
	}
	cases := []struct {
		name      string
		endpoints []string
		tls       *transport.TLSInfo
		want      string
	}{
		{"wrong CA", live.Endpoints(), tlsFor(other.CAFile, "etcd.internal"), "certificate signed by unknown authority"},
		{"wrong server name", live.Endpoints(), tlsFor(client.CAFile, "other.internal"), "other.internal"},
		{"expired server certificate", stale.Endpoints(), tlsFor(client.CAFile, "etcd.internal"), "expired"},
		{"no CA given: system roots only", live.Endpoints(), nil, "x509"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: tc.endpoints, TLS: tc.tls, DialTimeout: tlsFaultDialTimeout})
			require.NoError(t, err)
			snap, err := s.Snapshot(t.Context())
			if snap != nil {
				snap.Close()
			}
			require.ErrorIs(t, err, backup.ErrNoMember)
			require.Contains(t, err.Error(), tc.want)
			t.Logf("%s: %v", tc.name, err)
		})
	}
	// The same client setup with the right CA and name works, so the
	// failures above are the TLS faults and nothing else.
	s, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: live.Endpoints(), TLS: tlsFor(client.CAFile, "etcd.internal")})
	require.NoError(t, err)
	snap, err := s.Snapshot(t.Context())
	require.NoError(t, err)
	require.NoError(t, snap.Close())
}
