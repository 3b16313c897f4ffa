package backuptest

import (
	"bytes"
	"context"
	"io"
	"sync"

	"github.com/etcdbackup/etcdbackup/backup"
)

// Snapshotter is a backup.Snapshotter that serves the same stream at every
// call, through backup.NewSnapshot, so that its trailer is checked as an
// etcd member's would be. Set its fields before the first Snapshot call;
// it is safe for concurrent use then.
type Snapshotter struct {
	// Stream is the snapshot stream served: KeysSnapshot, Stream, or any
	// bytes (a broken trailer makes the backup fail its integrity check).
	Stream []byte
	// Info is what each snapshot reports when it opens (member, cluster,
	// etcd version, revision bounds). NewSnapshotter fills it in.
	Info backup.SnapshotInfo
	// OpenErr, when set, is returned by Snapshot: the member could not be
	// reached.
	OpenErr error
	// Err, when set, ends the stream with it once FailAt bytes have been
	// read: the connection to the member broke halfway.
	Err    error
	FailAt int64

	mu    sync.Mutex
	calls int
}

var _ backup.Snapshotter = (*Snapshotter)(nil)

// NewSnapshotter returns a Snapshotter serving stream, taken at revision
// rev (RevisionLow and RevisionHigh both; zero means unknown), from a
// member of etcd 3.7.3.
func NewSnapshotter(stream []byte, rev int64) *Snapshotter {
	return &Snapshotter{Stream: stream, Info: backup.SnapshotInfo{
		Endpoint: "backuptest", MemberID: 0xabc, MemberName: "backuptest", ClusterID: 0xdef,
		EtcdVersion: "3.7.3", Leader: true, Healthy: true, RevisionLow: rev, RevisionHigh: rev,
	}}
}

// Snapshot implements backup.Snapshotter.
func (s *Snapshotter) Snapshot(ctx context.Context) (*backup.Snapshot, error) {
	s.mu.Lock()
	s.calls++
	s.mu.Unlock()
	if s.OpenErr != nil {
		return nil, s.OpenErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var r io.Reader = bytes.NewReader(s.Stream)
	if s.Err != nil {
		r = io.MultiReader(io.LimitReader(r, max(s.FailAt, 0)), errReader{s.Err})
	}
	return backup.NewSnapshot(io.NopCloser(contextReader{ctx, r}), s.Info, nil), nil
}

// Calls returns how many times Snapshot was called.
func (s *Snapshotter) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// contextReader fails reads once ctx ends, as the etcd snapshotter's
// stream does.
type contextReader struct {
	ctx context.Context
	r   io.Reader
}

func (c contextReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
