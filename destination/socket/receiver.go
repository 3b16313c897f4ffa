package socket

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
)

// Receiver accepts backups sent by Uploaders and stores each, verified,
// through Uploader, under the cluster the sender names.
type Receiver struct {
	// Uploader stores what is received: a destination's (see
	// destination.Destination.Target). Required.
	Uploader backup.Uploader
	// Destination is the name recorded in the stored manifests.
	Destination string
	// Timeout bounds the wait for each read from a sender; zero means
	// one minute. A sender silent for longer is cut off: that includes the
	// wait between the end of the data and the commit line, which a
	// sender's pipeline sends once every destination of its run has its
	// data.
	Timeout time.Duration
	// Logger receives a line per backup; nil is silent.
	Logger *slog.Logger
}

// Serve accepts connections on l until ctx ends, and handles each in a
// goroutine of its own. It closes l, waits for the connections in flight
// and returns nil once ctx ended, or the listener's error.
func (r *Receiver) Serve(ctx context.Context, l net.Listener) error {
	if r.Uploader == nil {
		return errors.New("receiver has no uploader")
	}
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept: %w", err)
		}
		wg.Go(func() {
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
	br := bufio.NewReaderSize(deadlineReader{conn: conn, timeout: timeout}, 64<<10)
	m, err := r.receive(ctx, br)
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

func (r *Receiver) receive(ctx context.Context, br *bufio.Reader) (*backup.Manifest, error) {
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
	start.Destination = r.Destination
	fr := newFrameReader(br, &start)
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

func (r *Receiver) logger() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// deadlineReader sets a read deadline before each read.
type deadlineReader struct {
	conn    net.Conn
	timeout time.Duration
}

func (d deadlineReader) Read(p []byte) (int, error) {
	_ = d.conn.SetReadDeadline(time.Now().Add(d.timeout))
	return d.conn.Read(p)
}
