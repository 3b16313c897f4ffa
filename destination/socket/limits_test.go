package socket_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/backup/backuptest"
	"github.com/etcdbackup/etcdbackup/destination/socket"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// serve runs r (its Uploader, when nil, the in-memory destination
// "received") on l until the test ends.
func serve(t *testing.T, r *socket.Receiver, l net.Listener) *backuptest.Destinations {
	t.Helper()
	dests := backuptest.NewDestinations("received")
	if r.Uploader == nil {
		up, err := dests.Uploader(t.Context(), "received")
		require.NoError(t, err)
		r.Uploader, r.Destination = up, "received"
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		_ = dests.Close()
	})
	return dests
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return l
}

// peer accepts connections on a loopback listener and hands each to fn;
// it stands for a receiver that misbehaves.
func peer(t *testing.T, fn func(net.Conn)) string {
	t.Helper()
	l := listen(t)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go fn(c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// save runs a pipeline as `etcdbackup save` does (no stall timeout, a
// context without deadline) and fails the test if it takes over 30 s.
func save(t *testing.T, u *socket.Uploader, cluster string, snap backup.Snapshotter) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		p := &backup.Pipeline{Snapshotter: snap, Compression: backup.None}
		_, err := p.Run(context.Background(), backup.Request{Cluster: cluster, Name: "nightly",
			Targets: []backup.Target{{Destination: "socket", Uploader: u}}})
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("save still running after 30s")
		return nil
	}
}

// answer reads what the receiver sends on c before closing it, waiting at
// most 30 s.
func answer(t *testing.T, c net.Conn) string {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
	b, err := io.ReadAll(c)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "no answer after 30s")
	return string(b)
}

// emfileListener fails its first Accept with EMFILE, as a process out of
// file descriptors does.
type emfileListener struct {
	net.Listener
	once sync.Once
}

func (f *emfileListener) Accept() (net.Conn, error) {
	var err error
	f.once.Do(func() {
		err = &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	})
	if err != nil {
		return nil, err
	}
	return f.Listener.Accept()
}

// A transient accept error (EMFILE) does not stop the receiver.
func TestServeRetriesTemporaryAcceptErrors(t *testing.T) {
	l := listen(t)
	dests := serve(t, &socket.Receiver{}, &emfileListener{Listener: l})
	err := save(t, &socket.Uploader{Addr: l.Addr().String()}, "prod-a", backuptest.NewSnapshotter(backuptest.Stream(8, 1), 5))
	require.NoError(t, err)
	got, err := backuptest.Backups(t.Context(), dests.Bucket("received"), "prod-a")
	require.NoError(t, err)
	require.Len(t, got, 1)
}

// Senders trickling a start line byte by byte, each byte within the read
// timeout, are cut off once the start deadline passed.
func TestReceiverCutsTricklingStartLines(t *testing.T) {
	l := listen(t)
	serve(t, &socket.Receiver{Timeout: time.Second}, l)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	for range 20 {
		c, err := net.Dial("tcp", l.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		wg.Go(func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if _, err := c.Write([]byte("e")); err != nil {
					return
				}
			}
		})
		defer func() { require.Contains(t, answer(t, c), "error ") }()
	}
}

// A receiver at its connection limit answers further senders at once.
func TestReceiverCapsConnections(t *testing.T) {
	l := listen(t)
	serve(t, &socket.Receiver{MaxConns: 2, Timeout: 30 * time.Second}, l)
	for range 2 {
		c, err := net.Dial("tcp", l.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Write([]byte(socket.Hello + "\n"))
		require.NoError(t, err)
	}
	c, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	require.Contains(t, answer(t, c), "error receiver busy")
}

// A sender sending valid frames too slowly is cut off at the backup's
// deadline although each read is within the read timeout.
func TestReceiverBoundsBackupDuration(t *testing.T) {
	l := listen(t)
	serve(t, &socket.Receiver{MaxDuration: time.Second, Timeout: 30 * time.Second}, l)
	c, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	m := `{"format":1,"id":"prod-a-slow","cluster":"prod-a","name":"slow","created":"2026-01-01T00:00:00Z","dataKey":"20260101T000000.000Z_prod-a-slow.db","compression":"none"}`
	_, err = c.Write([]byte(socket.Hello + "\n" + m + "\n"))
	require.NoError(t, err)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := c.Write([]byte("\x00\x00\x00\x01x")); err != nil {
				return
			}
		}
	})
	require.Contains(t, answer(t, c), "error ")
}

// A receiver that accepts and never reads: the sender's writes stop
// making progress and the save fails.
func TestSenderGivesUpOnANonReadingReceiver(t *testing.T) {
	addr := peer(t, func(net.Conn) {})
	err := save(t, &socket.Uploader{Addr: addr, WriteTimeout: 500 * time.Millisecond}, "prod-a",
		backuptest.NewSnapshotter(backuptest.Stream(64<<10, 1), 5)) // 32 MiB
	require.ErrorContains(t, err, "send data")
}

// A receiver that reads everything and never answers: the sender's
// Commit gives up.
func TestSenderGivesUpOnASilentReceiver(t *testing.T) {
	addr := peer(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	err := save(t, &socket.Uploader{Addr: addr, AnswerTimeout: 500 * time.Millisecond}, "prod-a",
		backuptest.NewSnapshotter(backuptest.Stream(8, 1), 5))
	require.ErrorContains(t, err, "receiver's answer")
}

type readOnlyUploader struct{}

func (readOnlyUploader) Upload(context.Context, *backup.Manifest, io.Reader) error {
	return errors.New("destination received is read-only")
}
func (readOnlyUploader) Commit(context.Context, *backup.Manifest) error { return nil }

// A receiver refusing while the sender still writes: the sender's error
// gives the receiver's reason.
func TestSenderReportsTheReceiversReason(t *testing.T) {
	l := listen(t)
	serve(t, &socket.Receiver{Uploader: readOnlyUploader{}}, l)
	err := save(t, &socket.Uploader{Addr: l.Addr().String()}, "prod-a",
		backuptest.NewSnapshotter(backuptest.Stream(32<<10, 1), 5)) // 16 MiB
	require.ErrorContains(t, err, "read-only")
	require.ErrorIs(t, err, socket.ErrProtocol)
}

// A receiver with an allow-list refuses other clusters; one with a size
// limit refuses larger backups. Nothing is stored of either.
func TestReceiverRefusesClustersAndSizes(t *testing.T) {
	l := listen(t)
	dests := serve(t, &socket.Receiver{Clusters: []string{"prod-a"}, MaxBytes: 1 << 20}, l)
	u := &socket.Uploader{Addr: l.Addr().String()}
	err := save(t, u, "prod-b", backuptest.NewSnapshotter(backuptest.Stream(8, 1), 5))
	require.ErrorContains(t, err, `cluster "prod-b" is not allowed`)
	err = save(t, u, "prod-a", backuptest.NewSnapshotter(backuptest.Stream(8<<10, 1), 5)) // 4 MiB
	require.ErrorContains(t, err, "more than 1048576 bytes")
	for key, err := range dests.Bucket("received").List(t.Context(), "") {
		require.NoError(t, err)
		t.Fatalf("%s stored", key.Key)
	}
	require.NoError(t, save(t, u, "prod-a", backuptest.NewSnapshotter(backuptest.Stream(8, 1), 5)))
}

// With ClusterFromCertificate, a sender writes only the cluster its
// client certificate names.
func TestReceiverBindsClustersToCertificates(t *testing.T) {
	ca := etcdtest.NewCA(t)
	server := ca.Issue(t, etcdtest.CertOptions{CommonName: "receiver", DNSNames: []string{"receiver.example"}})
	client := ca.Issue(t, etcdtest.CertOptions{CommonName: "sender", DNSNames: []string{"prod-a"}})
	scfg, err := socket.ServerTLS(server.CertFile, server.KeyFile, ca.CertFile)
	require.NoError(t, err)
	ccfg, err := socket.ClientTLS(ca.CertFile, client.CertFile, client.KeyFile, "receiver.example")
	require.NoError(t, err)
	l := listen(t)
	serve(t, &socket.Receiver{ClusterFromCertificate: true}, tls.NewListener(l, scfg))
	u := &socket.Uploader{Addr: l.Addr().String(), TLS: ccfg}
	err = save(t, u, "prod-b", backuptest.NewSnapshotter(backuptest.Stream(8, 1), 5))
	require.ErrorContains(t, err, "certificate")
	require.NoError(t, save(t, u, "prod-a", backuptest.NewSnapshotter(backuptest.Stream(8, 1), 5)))
	require.NoError(t, save(t, u, "sender", backuptest.NewSnapshotter(backuptest.Stream(8, 1), 5)))
}

// Discard ends the connection of an uploaded backup at once.
func TestUploaderDiscardClosesTheConnection(t *testing.T) {
	closed := make(chan struct{})
	addr := peer(t, func(c net.Conn) {
		_, _ = io.Copy(io.Discard, c)
		close(closed)
	})
	u := &socket.Uploader{Addr: addr}
	m := &backup.Manifest{ID: "prod-a-x", Cluster: "prod-a"}
	require.NoError(t, u.Upload(t.Context(), m, strings.NewReader("data")))
	require.NoError(t, u.Discard(t.Context(), m))
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("connection still open 30s after Discard")
	}
}
