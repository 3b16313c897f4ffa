package replicate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/etcdbackup/etcdbackup/backup"
)

// ErrDigestMismatch is returned when an object's bytes are not the ones its
// manifest describes (size or sha256). It matches backup.ErrIntegrity.
var ErrDigestMismatch = fmt.Errorf("%w: object does not match its manifest", backup.ErrIntegrity)

// verifyingReader hands on an object's bytes and fails the read that
// completes them when they are not the manifest's: the read that brings
// the count to the expected size checks the sha256 and returns an error
// with its bytes on a mismatch, so a consumer that stops at its reader's
// first error (a Put) never completes with them, even one that would not
// read on to io.EOF. More bytes than expected, or fewer, fail too.
type verifyingReader struct {
	r    io.Reader
	want backup.Digest
	h    hash.Hash
	n    int64
	err  error // sticky once the check ran or failed
	done bool  // the bytes were complete and matched
}

func newVerifyingReader(r io.Reader, want backup.Digest) *verifyingReader {
	return &verifyingReader{r: r, want: want, h: sha256.New()}
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	if v.done {
		// Every byte was read and matched: anything further is too much.
		var one [1]byte
		n, err := v.r.Read(one[:])
		switch {
		case n > 0:
			v.err = fmt.Errorf("%w: more than the %d bytes expected", ErrDigestMismatch, v.want.Size)
			return 0, v.err
		case err == nil:
			return 0, nil
		}
		if errors.Is(err, io.EOF) {
			return 0, io.EOF
		}
		v.err = err
		return 0, err
	}
	if left := v.want.Size - v.n; int64(len(p)) > left+1 {
		p = p[:left+1] // one byte more shows an object too long
	}
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	switch {
	case v.n > v.want.Size:
		v.err = fmt.Errorf("%w: more than the %d bytes expected", ErrDigestMismatch, v.want.Size)
		return 0, v.err
	case v.n == v.want.Size:
		if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want.SHA256 {
			v.err = fmt.Errorf("%w: sha256 %s, manifest says %s", ErrDigestMismatch, got, v.want.SHA256)
			return n, v.err
		}
		v.done = true
		if errors.Is(err, io.EOF) {
			return n, io.EOF
		}
		return n, nil
	case errors.Is(err, io.EOF):
		v.err = fmt.Errorf("%w: %d bytes, manifest says %d", ErrDigestMismatch, v.n, v.want.Size)
		return n, v.err
	}
	return n, err
}

// verified reports whether every byte was read and matched.
func (v *verifyingReader) verified() bool { return v.done && v.err == nil }
