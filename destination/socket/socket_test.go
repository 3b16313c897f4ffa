package socket_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/backup/backuptest"
	"github.com/etcdbackup/etcdbackup/destination/socket"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/restore"
)

// receiver serves a Receiver storing into the in-memory destination
// "received" on a loopback listener, wrapped in TLS when cfg is set. It
// returns the listener's address and the destinations.
func receiver(t *testing.T, cfg *tls.Config) (string, *backuptest.Destinations) {
	t.Helper()
	dests := backuptest.NewDestinations("received")
	up, err := dests.Uploader(t.Context(), "received")
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	if cfg != nil {
		l = tls.NewListener(l, cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- (&socket.Receiver{Uploader: up, Destination: "received", Timeout: 30 * time.Second}).Serve(ctx, l)
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		_ = dests.Close()
	})
	return l.Addr().String(), dests
}

func send(t *testing.T, u *socket.Uploader, snap backup.Snapshotter) (*backup.Result, error) {
	t.Helper()
	p := &backup.Pipeline{Snapshotter: snap, Compression: backup.Zstd}
	return p.Run(t.Context(), backup.Request{Cluster: "prod-a", Name: "nightly", Targets: []backup.Target{{Destination: "socket", Uploader: u}}})
}

// A save to a receiver stores a backup that verifies: its manifest, the
// stored bytes' digest, etcd's trailer and the database.
func TestSocketStoresAVerifiedBackup(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // after the receiver stopped
	addr, dests := receiver(t, nil)
	stream, rev, err := backuptest.KeysSnapshot(map[string]string{"/a": "1", "/b": "2"})
	require.NoError(t, err)
	res, err := send(t, &socket.Uploader{Addr: addr}, backuptest.NewSnapshotter(stream, rev))
	require.NoError(t, err)

	got, err := backuptest.Backups(t.Context(), dests.Bucket("received"), "prod-a")
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, res.ID, got[0].ID)
	require.Equal(t, "received", got[0].Manifest.Destination)
	require.Equal(t, res.Stored, got[0].Manifest.Stored)
	b, err := restore.Find(t.Context(), []restore.Source{{Name: "received", Catalog: dests.Bucket("received")}}, restore.Query{Cluster: "prod-a"})
	require.NoError(t, err)
	fetched, err := (&restore.Restorer{}).Fetch(t.Context(), b, filepath.Join(t.TempDir(), "db"))
	require.NoError(t, err)
	require.True(t, fetched.ManifestChecked)
}

// A connection cut halfway, by the sender's snapshot failing or by the
// sender vanishing mid-frame, stores nothing at all.
func TestSocketCutStoresNothing(t *testing.T) {
	addr, dests := receiver(t, nil)
	stream := backuptest.Stream(4096, 1) // 2 MiB
	snap := backuptest.NewSnapshotter(stream, 7)
	snap.Err, snap.FailAt = errors.New("member went away"), int64(len(stream)/2)
	_, err := send(t, &socket.Uploader{Addr: addr}, snap)
	require.ErrorContains(t, err, "member went away")

	// A raw sender: a valid start, some data, then nothing: cut in a
	// frame, at a frame's end, and after the end frame (no manifest).
	m := `{"format":1,"id":"prod-a-cut","cluster":"prod-a","name":"cut","destination":"x","created":"2026-01-01T00:00:00Z","completed":"0001-01-01T00:00:00Z","dataKey":"20260101T000000.000Z_prod-a-cut.db","etcd":{},"raw":{"size":0,"sha256":""},"stored":{"size":0,"sha256":""},"compression":"none","library":"x"}`
	for _, data := range []string{"\x00\x00\x00\x05abc", "\x00\x00\x00\x03abc", "\x00\x00\x00\x03abc\x00\x00\x00\x00"} {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, err = conn.Write([]byte(socket.Hello + "\n" + m + "\n" + data))
		require.NoError(t, err)
		require.NoError(t, conn.(*net.TCPConn).CloseWrite())
		answer, err := bufio.NewReader(conn).ReadString('\n')
		require.NoError(t, err)
		require.Contains(t, answer, "error ")
		conn.Close()
	}

	for key, err := range dests.Bucket("received").List(t.Context(), "") {
		require.NoError(t, err)
		t.Fatalf("%s stored from a cut connection", key.Key)
	}
}

// TLS: the receiver's certificate must name the server the sender
// expects, and a sender without a client certificate is refused when the
// receiver asks for one.
func TestSocketTLS(t *testing.T) {
	ca := etcdtest.NewCA(t)
	server := ca.Issue(t, etcdtest.CertOptions{CommonName: "receiver", DNSNames: []string{"receiver.example"}})
	client := ca.Issue(t, etcdtest.CertOptions{CommonName: "sender"})
	scfg, err := socket.ServerTLS(server.CertFile, server.KeyFile, ca.CertFile)
	require.NoError(t, err)
	addr, dests := receiver(t, scfg)
	stream, rev, err := backuptest.KeysSnapshot(map[string]string{"/a": "1"})
	require.NoError(t, err)

	wrong, err := socket.ClientTLS(ca.CertFile, client.CertFile, client.KeyFile, "other.example")
	require.NoError(t, err)
	_, err = send(t, &socket.Uploader{Addr: addr, TLS: wrong}, backuptest.NewSnapshotter(stream, rev))
	require.ErrorContains(t, err, "other.example")

	anonymous, err := socket.ClientTLS(ca.CertFile, "", "", "receiver.example")
	require.NoError(t, err)
	_, err = send(t, &socket.Uploader{Addr: addr, TLS: anonymous}, backuptest.NewSnapshotter(stream, rev))
	require.Error(t, err)

	got, err := backuptest.Backups(t.Context(), dests.Bucket("received"), "prod-a")
	require.NoError(t, err)
	require.Empty(t, got)

	right, err := socket.ClientTLS(ca.CertFile, client.CertFile, client.KeyFile, "receiver.example")
	require.NoError(t, err)
	_, err = send(t, &socket.Uploader{Addr: addr, TLS: right}, backuptest.NewSnapshotter(stream, rev))
	require.NoError(t, err)
	got, err = backuptest.Backups(t.Context(), dests.Bucket("received"), "prod-a")
	require.NoError(t, err)
	require.Len(t, got, 1)
}
