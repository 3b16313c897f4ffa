package backup

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
)

// TrailerSize is the length of the sha256 digest etcd appends to a snapshot
// stream.
const TrailerSize = sha256.Size

// trailerAlign is etcd's rule for telling whether a snapshot file carries a
// trailer: the bbolt database is a whole number of pages, so a file with a
// trailer has size%512 == 32 (etcdutl's hasChecksum uses the same rule).
const trailerAlign = 512

// ErrSnapshotIntegrity is matched (errors.Is) by every error reporting a
// snapshot stream whose sha256 trailer is missing, short or wrong.
var ErrSnapshotIntegrity = errors.New("snapshot integrity")

// IntegrityError reports a snapshot stream that failed the trailer check. It
// unwraps to ErrSnapshotIntegrity.
type IntegrityError struct {
	// Size is the number of bytes the stream held, trailer included.
	Size int64
	// Problem says what is wrong, in a few lowercase words.
	Problem string
	// Trailer is the digest found at the end of the stream and Computed the
	// sha256 of the bytes before it. Both are zero unless Problem is a
	// mismatch.
	Trailer, Computed [sha256.Size]byte
}

// Problems an IntegrityError may report.
const (
	ProblemShort     = "stream shorter than a sha256 trailer"
	ProblemNoTrailer = "stream has no sha256 trailer"
	ProblemMismatch  = "sha256 trailer does not match the data"
)

// Error says what is wrong with the stream, with its size and digests.
func (e *IntegrityError) Error() string {
	switch e.Problem {
	case ProblemNoTrailer:
		return fmt.Sprintf("%v: %s (%d bytes; size%%%d is %d, want %d)",
			ErrSnapshotIntegrity, e.Problem, e.Size, trailerAlign, e.Size%trailerAlign, TrailerSize)
	case ProblemMismatch:
		return fmt.Sprintf("%v: %s (%d bytes; trailer %s, computed %s)",
			ErrSnapshotIntegrity, e.Problem, e.Size,
			hex.EncodeToString(e.Trailer[:]), hex.EncodeToString(e.Computed[:]))
	default:
		return fmt.Sprintf("%v: %s (%d bytes)", ErrSnapshotIntegrity, e.Problem, e.Size)
	}
}

// Unwrap returns ErrSnapshotIntegrity.
func (e *IntegrityError) Unwrap() error { return ErrSnapshotIntegrity }

// TrailerReader passes an etcd snapshot stream through unchanged, trailer
// included, and checks the trailer as the bytes flow: at the end of the
// stream it returns an *IntegrityError instead of io.EOF when the trailer is
// missing, short or wrong. A consumer that stops at the first error (an
// upload, io.Copy) therefore never completes with a damaged snapshot.
//
// The bytes handed out keep the trailer because etcdutl snapshot restore
// checks it too; the stored object stays restorable with hash checking on.
//
// TrailerReader keeps the last 32 bytes seen in a fixed buffer and hashes
// everything before them, so it neither buffers the stream nor allocates
// per Read. It is not safe for concurrent use.
type TrailerReader struct {
	r    io.Reader
	h    hash.Hash
	tail [TrailerSize]byte // the last bytes seen; not hashed yet
	nt   int               // bytes in tail
	size int64             // bytes read from r
	err  error             // sticky: io.EOF once verified, or the failure
	sum  [sha256.Size]byte // sha256 of the whole stream, once verified
	ok   bool              // the trailer matched

	// plain reads a stream that has no trailer, a logical export's: every
	// byte is hashed, and the end of the stream is its only check.
	plain bool
}

// VerifyTrailer returns a TrailerReader reading from r, which must yield an
// etcd snapshot stream from its first byte.
func VerifyTrailer(r io.Reader) *TrailerReader {
	return &TrailerReader{r: r, h: sha256.New()}
}

// Read reads from the underlying stream. It returns io.EOF only once the
// whole stream has been read and its trailer matched; a damaged stream ends
// with an error matching ErrSnapshotIntegrity instead. Errors of the
// underlying reader are returned unchanged.
func (t *TrailerReader) Read(p []byte) (int, error) {
	if t.err != nil {
		return 0, t.err
	}
	n, err := t.r.Read(p)
	if t.plain {
		t.size += int64(n)
		t.h.Write(p[:n])
		if err == io.EOF {
			t.h.Sum(t.sum[:0])
			t.ok, t.err = true, io.EOF
		}
		return n, err
	}
	if n > 0 {
		t.size += int64(n)
		t.hold(p[:n])
	}
	if err == io.EOF {
		t.err = t.verify()
		return n, t.err
	}
	return n, err
}

// hold hashes everything but the last TrailerSize bytes of tail+b and keeps
// those in tail.
func (t *TrailerReader) hold(b []byte) {
	total := t.nt + len(b)
	if total <= TrailerSize {
		t.nt += copy(t.tail[t.nt:], b)
		return
	}
	excess := total - TrailerSize // bytes now known not to be the trailer
	fromTail := min(excess, t.nt)
	t.h.Write(t.tail[:fromTail])
	t.h.Write(b[:excess-fromTail])
	kept := copy(t.tail[:], t.tail[fromTail:t.nt])
	copy(t.tail[kept:], b[excess-fromTail:])
	t.nt = TrailerSize
}

func (t *TrailerReader) verify() error {
	if t.size < TrailerSize {
		return &IntegrityError{Size: t.size, Problem: ProblemShort}
	}
	if t.size%trailerAlign != TrailerSize {
		return &IntegrityError{Size: t.size, Problem: ProblemNoTrailer}
	}
	var computed [sha256.Size]byte
	t.h.Sum(computed[:0])
	if computed != t.tail {
		return &IntegrityError{Size: t.size, Problem: ProblemMismatch, Trailer: t.tail, Computed: computed}
	}
	// Sum leaves the state as it was, so the whole-stream digest costs one
	// more block, not a second pass.
	t.h.Write(t.tail[:])
	t.h.Sum(t.sum[:0])
	t.ok = true
	return io.EOF
}

// Size returns the number of bytes read so far, trailer included. After a
// verified end of stream it is the raw size of the snapshot.
func (t *TrailerReader) Size() int64 { return t.size }

// Verified reports whether the stream has been read to its end and its
// trailer matched.
func (t *TrailerReader) Verified() bool { return t.ok }

// SHA256 returns the sha256 of the whole stream, trailer included: the
// digest of the bytes a consumer received. ok is false until Verified.
func (t *TrailerReader) SHA256() (sum [sha256.Size]byte, ok bool) {
	return t.sum, t.ok
}

// Trailer returns the digest etcd sent, which is the sha256 of the bbolt
// database alone. ok is false until Verified.
func (t *TrailerReader) Trailer() (sum [sha256.Size]byte, ok bool) {
	if !t.ok {
		return sum, false
	}
	return t.tail, true
}
