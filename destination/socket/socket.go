// Package socket sends backups over a TCP connection (optionally TLS) to a
// Receiver that verifies and stores them on a destination of its own, so
// that a backup crosses a network boundary with no object store on the
// sending side.
//
// # Framing (version 1)
//
// One connection carries one backup. The sender writes:
//
//	etcdbackup-socket 1\n
//	<start line: the manifest as the pipeline knows it before the stream (JSON)>\n
//	<frames: a 4-byte big-endian length n, 1 <= n <= MaxFrame, then n bytes>...
//	<a frame of length 0: the end of the data>
//	<commit line: the finished manifest (JSON), whose Stored size and sha256
//	 are those of the frames' bytes>\n
//
// The bytes of the frames are exactly the data object a stored backup
// holds (compressed, encrypted). The receiver answers one line: "ok\n" once
// the backup is stored and its manifest committed, or "error <reason>\n".
// Lines are at most backup.MaxManifestSize bytes.
//
// The receiver hands the frames' bytes to its destination's Uploader as
// they come, and ends that stream only once the commit line has been read
// and its size and sha256 match the bytes received: a connection cut at
// any point, or a manifest that does not match, makes the upload fail, and
// nothing of the backup becomes visible on the receiving side.
//
// A receiver stores what anyone who reaches it sends, under the cluster
// name the sender gives: on a network not wholly trusted, listen with TLS
// and require client certificates (ServerTLS with a client CA). The
// receiver's uploader decides whether an existing object may be replaced:
// a destination on a store with exclusive creates refuses a backup whose
// data key exists (backup.ErrBackupExists), and the sender gives each run
// an ID of its own, since Uploader is not an ExclusiveUploader. A sender
// whose Commit fails after the receiver stored the backup (a lost answer)
// leaves that backup stored.
package socket

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"strings"
	"sync"

	"github.com/etcdbackup/etcdbackup/backup"
)

// Hello is the first line of every connection.
const Hello = "etcdbackup-socket 1"

// MaxFrame is the largest frame.
const MaxFrame = 1 << 20

// ErrProtocol matches errors about what the other side sent: a bad hello,
// line or frame, a manifest that does not match the bytes, or an error
// the receiver answered.
var ErrProtocol = errors.New("socket protocol")

// Uploader is a backup.Uploader that sends each backup to a Receiver.
// Upload sends the data; Commit sends the finished manifest and returns
// once the receiver has stored and committed the backup.
type Uploader struct {
	// Addr is the receiver's host:port.
	Addr string
	// TLS, when set, makes the connection TLS with this configuration
	// (RootCAs, Certificates for a client certificate, ServerName).
	TLS *tls.Config
	// Dialer dials; nil means a net.Dialer.
	Dialer *net.Dialer

	mu    sync.Mutex
	conns map[string]*senderConn // by backup ID, between Upload and Commit
}

var _ backup.Uploader = (*Uploader)(nil)

type senderConn struct {
	conn net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
}

// Upload connects, sends the start line and r's bytes in frames, and ends
// the data. The connection stays open for Commit.
func (u *Uploader) Upload(ctx context.Context, m *backup.Manifest, r io.Reader) error {
	sc, err := u.dial(ctx)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { sc.conn.Close() })
	defer stop()
	if err := sc.send(m, r); err != nil {
		sc.conn.Close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	u.mu.Lock()
	if u.conns == nil {
		u.conns = map[string]*senderConn{}
	}
	if old := u.conns[m.ID]; old != nil {
		old.conn.Close()
	}
	u.conns[m.ID] = sc
	u.mu.Unlock()
	return nil
}

func (u *Uploader) dial(ctx context.Context) (*senderConn, error) {
	d := u.Dialer
	if d == nil {
		d = &net.Dialer{}
	}
	var conn net.Conn
	var err error
	if u.TLS != nil {
		conn, err = (&tls.Dialer{NetDialer: d, Config: u.TLS}).DialContext(ctx, "tcp", u.Addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", u.Addr)
	}
	if err != nil {
		return nil, fmt.Errorf("connect to receiver %s: %w", u.Addr, err)
	}
	return &senderConn{conn: conn, br: bufio.NewReader(conn), bw: bufio.NewWriterSize(conn, 64<<10)}, nil
}

func (sc *senderConn) send(m *backup.Manifest, r io.Reader) error {
	start, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	sc.bw.WriteString(Hello + "\n")
	sc.bw.Write(start)
	sc.bw.WriteByte('\n')
	buf := make([]byte, 4+64<<10)
	for {
		n, rerr := r.Read(buf[4:])
		if n > 0 {
			binary.BigEndian.PutUint32(buf, uint32(n))
			if _, err := sc.bw.Write(buf[:4+n]); err != nil {
				return fmt.Errorf("send data: %w", err)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	binary.BigEndian.PutUint32(buf, 0)
	sc.bw.Write(buf[:4])
	if err := sc.bw.Flush(); err != nil {
		return fmt.Errorf("send data: %w", err)
	}
	return nil
}

// Commit sends the finished manifest and waits for the receiver's answer.
func (u *Uploader) Commit(ctx context.Context, m *backup.Manifest) error {
	u.mu.Lock()
	sc := u.conns[m.ID]
	delete(u.conns, m.ID)
	u.mu.Unlock()
	if sc == nil {
		return fmt.Errorf("commit %s: nothing was uploaded", m.ID)
	}
	defer sc.conn.Close()
	stop := context.AfterFunc(ctx, func() { sc.conn.Close() })
	defer stop()
	line, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	sc.bw.Write(line)
	sc.bw.WriteByte('\n')
	if err := sc.bw.Flush(); err != nil {
		return fmt.Errorf("send manifest: %w", err)
	}
	answer, err := readLine(sc.br)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("receiver's answer: %w", err)
	}
	if string(answer) != "ok" {
		return fmt.Errorf("%w: receiver: %s", ErrProtocol, strings.TrimPrefix(string(answer), "error "))
	}
	return nil
}

// readLine reads a line of at most backup.MaxManifestSize bytes, without
// its newline.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > backup.MaxManifestSize+1 {
			return nil, fmt.Errorf("%w: a line longer than %d bytes", ErrProtocol, backup.MaxManifestSize)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF:
			return nil, fmt.Errorf("%w: connection closed mid-line", ErrProtocol)
		default:
			return nil, err
		}
	}
}

// frameReader reads the frames of a connection as one stream. At the end
// frame it reads the commit line and ends with io.EOF only if its manifest
// is the start line's backup and records the size and sha256 of the bytes
// read; else it fails, so that the upload it feeds is aborted.
type frameReader struct {
	br     *bufio.Reader
	start  *backup.Manifest
	left   int // bytes left in the current frame
	size   int64
	sum    hash.Hash
	final  *backup.Manifest
	err    error
	header [4]byte
}

func (f *frameReader) Read(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	for f.left == 0 {
		if _, err := io.ReadFull(f.br, f.header[:]); err != nil {
			f.err = fmt.Errorf("%w: connection closed before the end of the data: %w", ErrProtocol, err)
			return 0, f.err
		}
		n := binary.BigEndian.Uint32(f.header[:])
		if n > MaxFrame {
			f.err = fmt.Errorf("%w: a frame of %d bytes, more than %d", ErrProtocol, n, MaxFrame)
			return 0, f.err
		}
		if n == 0 {
			f.err = f.commitLine()
			return 0, f.err
		}
		f.left = int(n)
	}
	n, err := f.br.Read(p[:min(len(p), f.left)])
	f.left -= n
	f.size += int64(n)
	f.sum.Write(p[:n])
	if err != nil {
		f.err = fmt.Errorf("%w: connection closed in a frame: %w", ErrProtocol, err)
		return n, f.err
	}
	return n, nil
}

// commitLine reads and checks the finished manifest; io.EOF means it
// matched.
func (f *frameReader) commitLine() error {
	line, err := readLine(f.br)
	if err != nil {
		return fmt.Errorf("%w: no manifest after the data: %w", ErrProtocol, err)
	}
	m, err := backup.ParseManifest(bytes.NewReader(line))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	sum := hex.EncodeToString(f.sum.Sum(nil))
	switch {
	case m.ID != f.start.ID || m.Cluster != f.start.Cluster || m.DataKey != f.start.DataKey:
		return fmt.Errorf("%w: the manifest is of backup %s, the data of %s", ErrProtocol, m.ID, f.start.ID)
	case m.Stored.Size != f.size || !strings.EqualFold(m.Stored.SHA256, sum):
		return fmt.Errorf("%w: the manifest says %d bytes of sha256 %s, %d bytes of sha256 %s were received",
			ErrProtocol, m.Stored.Size, m.Stored.SHA256, f.size, sum)
	}
	f.final = m
	return io.EOF
}

// newFrameReader returns the reader of a backup whose start line was m.
func newFrameReader(br *bufio.Reader, m *backup.Manifest) *frameReader {
	return &frameReader{br: br, start: m, sum: sha256.New()}
}
