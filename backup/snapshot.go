package backup

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"sync"
	"time"
)

// Snapshotter takes a snapshot of one etcd member.
//
// The context governs the whole stream, not only its opening: cancelling it
// makes further reads fail. The caller closes the returned Snapshot.
type Snapshotter interface {
	Snapshot(ctx context.Context) (*Snapshot, error)
}

// SnapshotInfo describes a snapshot: the member it came from, and, once the
// stream has been read to its end, the stream itself.
//
// etcd's snapshot stream carries no revision. RevisionLow is the member's
// revision just before the stream opened and RevisionHigh its revision just
// after the stream ended, so the revision of the data in the snapshot lies in
// [RevisionLow, RevisionHigh]; it is exact when the two are equal, which is
// the case when nothing was written to the cluster meanwhile.
type SnapshotInfo struct {
	// Endpoint is the client URL the snapshot was read from.
	Endpoint string
	// MemberID and MemberName identify the member snapshotted. MemberName is
	// empty when the member list could not be read.
	MemberID   uint64
	MemberName string
	// ClusterID is the ID of the member's cluster.
	ClusterID uint64
	// EtcdVersion is the member's server version, e.g. "3.7.3".
	EtcdVersion string
	// StorageVersion is the storage schema version etcd sends with the
	// snapshot, e.g. "3.7.0": restoring it needs an etcd of at least that
	// version. It is empty for etcd older than 3.6, and for a member of a new
	// cluster that has not recorded it yet (etcd does so within seconds of
	// deciding the cluster version).
	StorageVersion string
	// Leader and Learner tell the member's role when it was chosen.
	Leader  bool
	Learner bool
	// RaftAppliedIndex is the member's applied raft index when it was chosen.
	RaftAppliedIndex uint64
	// Healthy says whether the member reported no error (no alarm) when
	// it was chosen. LeaderID is the leader it knew then;
	// LeaderAppliedIndex and LeaderRevision are what that leader
	// reported at the choice, zero when it did not answer.
	Healthy            bool
	LeaderID           uint64
	LeaderAppliedIndex uint64
	LeaderRevision     int64
	// DBSize is the size of the member's database file as it reported it
	// when it was chosen; DBSizeInUse is the part of it holding data.
	DBSize      int64
	DBSizeInUse int64
	// RevisionLow is the member's revision just before the stream opened.
	RevisionLow int64
	// RevisionHigh is the member's revision just after the stream ended. It is
	// zero until the stream has been read to its end, and stays zero if the
	// member could not be asked then; only the lower bound is known then.
	RevisionHigh int64

	// Keys is, for a logical export (KeysExporter), the number of keys it
	// holds, known once the stream has ended; zero for a snapshot.
	Keys int64
	// Started is when the stream opened and Finished when it ended (zero
	// until then).
	Started, Finished time.Time

	// Complete is true once the stream has been read to its end and its
	// sha256 trailer matched. Size and SHA256 are valid only then.
	Complete bool
	// Size is the length of the stream in bytes, trailer included: the size
	// of the file `etcdctl snapshot save` would have written.
	Size int64
	// SHA256 is the sha256 of the whole stream, trailer included.
	SHA256 [sha256.Size]byte
}

// Revision returns the revision of the data in the snapshot when it is known
// exactly, that is when the stream is complete and both bounds are equal.
func (i SnapshotInfo) Revision() (rev int64, exact bool) {
	if i.Complete && i.RevisionLow != 0 && i.RevisionLow == i.RevisionHigh {
		return i.RevisionLow, true
	}
	return 0, false
}

// errSnapshotClosed is returned by reads after Close.
var errSnapshotClosed = errors.New("snapshot stream closed")

// Snapshot is an open snapshot stream: the bytes etcd sends, the bbolt
// database followed by its 32-byte sha256 trailer, read once. Reads pass
// through a TrailerReader, so the stream ends with io.EOF only if the trailer
// matched, and with an error matching ErrSnapshotIntegrity otherwise.
//
// Info describes the snapshot. Until a Read has returned io.EOF it holds what
// was known when the stream opened; after it, it is complete (Complete,
// Size, SHA256, RevisionHigh, Finished).
//
// Read must not be called concurrently with itself. Info may be called from
// any goroutine, and so may Close: for the etcd snapshotter, Close aborts a
// Read in progress (for other snapshotters, as far as their stream allows).
type Snapshot struct {
	rc     io.ReadCloser
	tr     *TrailerReader
	finish FinishFunc

	mu     sync.Mutex
	info   SnapshotInfo
	err    error // sticky result of the end of the stream
	closed bool
}

// FinishFunc completes a SnapshotInfo when its stream has been read to its
// end and verified: info has Complete, Size, SHA256 and Finished set. It
// returns the info to keep, typically with RevisionHigh filled in. An error
// is returned by Read in place of io.EOF.
type FinishFunc func(info SnapshotInfo) (SnapshotInfo, error)

// NewSnapshot returns a Snapshot reading rc, a raw etcd snapshot stream with
// its trailer, and verifying its trailer. info is what is known when the
// stream opens; finish, which may be nil, completes it at the end of the
// stream. Closing the Snapshot closes rc.
//
// Snapshotter implementations, including fakes in tests, build their
// snapshots with it so that every stream is verified.
func NewSnapshot(rc io.ReadCloser, info SnapshotInfo, finish FinishFunc) *Snapshot {
	info.Complete, info.Size, info.SHA256, info.Finished = false, 0, [sha256.Size]byte{}, time.Time{}
	if info.Started.IsZero() {
		info.Started = time.Now()
	}
	return &Snapshot{rc: rc, tr: VerifyTrailer(rc), finish: finish, info: info}
}

// Read reads the stream. See the type's documentation for how it ends.
func (s *Snapshot) Read(p []byte) (int, error) {
	s.mu.Lock()
	closed, done := s.closed, s.err
	s.mu.Unlock()
	if closed {
		return 0, errSnapshotClosed
	}
	if done != nil {
		return 0, done
	}
	n, err := s.tr.Read(p)
	if err != io.EOF {
		return n, err
	}
	return n, s.complete()
}

// complete runs once, at the verified end of the stream.
func (s *Snapshot) complete() error {
	s.mu.Lock()
	info := s.info
	s.mu.Unlock()

	info.Complete = true
	info.Size = s.tr.Size()
	info.SHA256, _ = s.tr.SHA256()
	info.Finished = time.Now()
	err := error(io.EOF)
	if s.finish != nil {
		finished, ferr := s.finish(info)
		if ferr != nil {
			err = ferr
		} else {
			info = finished
		}
	}

	s.mu.Lock()
	s.info, s.err = info, err
	s.mu.Unlock()
	return err
}

// Info returns what is known of the snapshot so far; see the type's
// documentation.
func (s *Snapshot) Info() SnapshotInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info
}

// Close ends the stream and releases what it holds (for the etcd
// snapshotter: the stream and its client connection). It may be called more
// than once and before the stream's end.
func (s *Snapshot) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	return s.rc.Close()
}
