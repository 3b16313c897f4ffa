package socket

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
)

// Defaults of the Receiver's limits.
const (
	// DefaultMaxConns is the Receiver's default MaxConns.
	DefaultMaxConns = 32
	// DefaultMaxDuration is the Receiver's default MaxDuration.
	DefaultMaxDuration = 6 * time.Hour
	// DefaultMaxBytes is the Receiver's default MaxBytes: 64 GiB, eight
	// times etcd's largest recommended database.
	DefaultMaxBytes = 64 << 30
)

// Receiver accepts backups sent by Uploaders and stores each, verified,
// through Uploader, under the cluster the sender names.
//
// Trust: a receiver stores what any sender that reaches it (and, with
// TLS and a client CA, presents a certificate of that CA) sends, under
// the cluster that sender names; Clusters restricts the names, and
// ClusterFromCertificate ties each sender to the clusters its certificate
// names. The limits (MaxConns, MaxDuration, MaxBytes, Timeout) bound what
// a sender can hold, not who may send.
type Receiver struct {
	// Uploader stores what is received: a destination's (see
	// destination.Destination.Target). Required.
	Uploader backup.Uploader
	// Destination is the name recorded in the stored manifests.
	Destination string
	// Timeout bounds the wait for each read from a sender, and the time
	// from the connection to the end of its start line; zero means one
	// minute. A sender silent for longer is cut off: that includes the
	// wait between the end of the data and the commit line, which a
	// sender's pipeline sends once every destination of its run has its
	// data.
	Timeout time.Duration
	// MaxDuration bounds the time from a connection to its commit line;
	// zero means DefaultMaxDuration.
	MaxDuration time.Duration
	// MaxConns is the number of connections handled at once; a sender
	// beyond it is answered "error receiver busy" at once. Zero means
	// DefaultMaxConns.
	MaxConns int
	// MaxBytes bounds the stored size of a backup; zero means
	// DefaultMaxBytes, negative no limit.
	MaxBytes int64
	// Clusters, when set, are the only cluster names stored.
	Clusters []string
	// ClusterFromCertificate, with a TLS listener requiring client
	// certificates, stores a backup only if its cluster is the client
	// certificate's common name or one of its DNS names.
	ClusterFromCertificate bool
	// Logger receives a line per backup; nil is silent.
	Logger *slog.Logger
}

// Serve accepts connections on l until ctx ends, and handles each in a
// goroutine of its own. Temporary accept errors (such as running out of
// file descriptors) are retried after a pause, as net/http does. It
// closes l, waits for the connections in flight and returns nil once ctx
// ended, or the listener's error.
func (r *Receiver) Serve(ctx context.Context, l net.Listener) error {
	if r.Uploader == nil {
		return errors.New("receiver has no uploader")
	}
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	maxConns := r.MaxConns
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	slots := make(chan struct{}, maxConns)
	var pause time.Duration
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne interface{ Temporary() bool }
			if !errors.As(err, &ne) || !ne.Temporary() {
				return fmt.Errorf("accept: %w", err)
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			r.logger().Warn("accept", "error", err, "retry in", pause)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(pause):
			}
			continue
		}
		pause = 0
		select {
		case slots <- struct{}{}:
		default:
			wg.Go(func() { r.refuse(conn, "receiver busy") })
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			defer conn.Close()
			m, err := r.Handle(ctx, conn)
			switch {
			case err != nil:
				r.logger().Warn("backup not stored", "remote", conn.RemoteAddr().String(), "error", err)
			default:
				r.logger().Info("backup stored", "backup", m.ID, "cluster", m.Cluster, "bytes", m.Stored.Size)
			}
		})
	}
}

// refuse answers an error to a connection not handled and closes it.
func (r *Receiver) refuse(conn net.Conn, reason string) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = conn.Write([]byte("error " + reason + "\n"))
	r.logger().Warn("backup not stored", "remote", conn.RemoteAddr().String(), "error", reason)
}

// Handle receives one backup on conn, stores and commits it, and answers
// the sender. It returns the committed manifest. Nothing is visible on
// the destination unless it returns nil.
func (r *Receiver) Handle(ctx context.Context, conn net.Conn) (*backup.Manifest, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	maxDuration := r.MaxDuration
	if maxDuration <= 0 {
		maxDuration = DefaultMaxDuration
	}
	now := time.Now()
	dr := &deadlineReader{conn: conn, timeout: timeout, until: now.Add(timeout)}
	br := bufio.NewReaderSize(dr, 64<<10)
	m, err := r.receive(ctx, conn, br, func() { dr.until = now.Add(maxDuration) })
	answer := "ok"
	if err != nil {
		answer = "error " + strings.ReplaceAll(err.Error(), "\n", " ")
	}
	_ = conn.SetWriteDeadline(time.Now().Add(timeout))
	if _, werr := conn.Write([]byte(answer + "\n")); werr != nil && err == nil {
		// Stored and committed: the sender may not know, but the backup
		// is there.
		r.logger().Warn("answer not sent", "backup", m.ID, "error", werr)
	}
	return m, err
}

// receive reads and stores a backup; started is called once the start
// line is read and accepted.
func (r *Receiver) receive(ctx context.Context, conn net.Conn, br *bufio.Reader, started func()) (*backup.Manifest, error) {
	hello, err := readLine(br)
	if err != nil {
		return nil, err
	}
	if string(hello) != Hello {
		return nil, fmt.Errorf("%w: hello %q, want %q", ErrProtocol, hello, Hello)
	}
	line, err := readLine(br)
	if err != nil {
		return nil, err
	}
	var start backup.Manifest
	if err := json.Unmarshal(line, &start); err != nil {
		return nil, fmt.Errorf("%w: start line: %w", ErrProtocol, err)
	}
	if err := backup.ValidateName("cluster", start.Cluster); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	if !backup.IsDataName(start.DataKey) {
		return nil, fmt.Errorf("%w: data key %q is not one this library writes", ErrProtocol, start.DataKey)
	}
	if err := r.allowed(conn, start.Cluster); err != nil {
		return nil, err
	}
	started()
	start.Destination = r.Destination
	fr := newFrameReader(br, &start)
	fr.max = r.MaxBytes
	if fr.max == 0 {
		fr.max = DefaultMaxBytes
	}
	if err := r.Uploader.Upload(ctx, &start, fr); err != nil {
		return nil, fmt.Errorf("store %s: %w", start.ID, err)
	}
	if fr.final == nil {
		// The uploader stopped reading before the end: never commit.
		return nil, fmt.Errorf("store %s: the uploader returned before the end of the data", start.ID)
	}
	final := fr.final
	final.Destination = r.Destination
	if err := r.Uploader.Commit(ctx, final); err != nil {
		return nil, fmt.Errorf("commit %s: %w", final.ID, err)
	}
	return final, nil
}

// allowed checks cluster against Clusters and, with
// ClusterFromCertificate, against the client certificate of conn.
func (r *Receiver) allowed(conn net.Conn, cluster string) error {
	if len(r.Clusters) > 0 && !slices.Contains(r.Clusters, cluster) {
		return fmt.Errorf("cluster %q is not allowed", cluster)
	}
	if !r.ClusterFromCertificate {
		return nil
	}
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return fmt.Errorf("cluster %q: the receiver takes clusters from client certificates and the connection has none", cluster)
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return fmt.Errorf("cluster %q: no client certificate", cluster)
	}
	if certs[0].Subject.CommonName == cluster || slices.Contains(certs[0].DNSNames, cluster) {
		return nil
	}
	return fmt.Errorf("cluster %q is not named by the client certificate", cluster)
}

func (r *Receiver) logger() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// deadlineReader sets a read deadline before each read: timeout from now,
// and never later than until.
type deadlineReader struct {
	conn    net.Conn
	timeout time.Duration
	until   time.Time
}

func (d *deadlineReader) Read(p []byte) (int, error) {
	deadline := time.Now().Add(d.timeout)
	if d.until.Before(deadline) {
		deadline = d.until
	}
	_ = d.conn.SetReadDeadline(deadline)
	return d.conn.Read(p)
}
