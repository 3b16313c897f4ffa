package backup

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"testing"
)

// FuzzTrailer checks, for any bytes and any read sizes, that the reader
// passes every byte through and accepts a stream exactly when etcd's rule
// does: size%512 == 32 and the last 32 bytes are the sha256 of the rest.
// With seal set, the bytes are first padded and sealed as etcd would send
// them, and flip (when inside the stream) flips one bit, which must be
// caught.
func FuzzTrailer(f *testing.F) {
	f.Add([]byte{}, false, uint32(0), uint8(0))
	f.Add([]byte("not a snapshot"), false, uint32(0), uint8(3))
	f.Add([]byte("a small database"), true, uint32(1<<31), uint8(1))
	f.Add(bytes.Repeat([]byte{0xab}, 1000), true, uint32(700), uint8(31))
	f.Add(bytes.Repeat([]byte{1, 2, 3}, 200), true, uint32(1024+5), uint8(64))

	f.Fuzz(func(t *testing.T, data []byte, seal bool, flip uint32, chunk uint8) {
		stream := data
		flipped := false
		if seal {
			db := make([]byte, (len(data)+511)/512*512)
			copy(db, data)
			sum := sha256.Sum256(db)
			stream = append(db, sum[:]...)
			if int(flip/8) < len(stream) {
				stream[flip/8] ^= 1 << (flip % 8)
				flipped = true
			}
		}

		var got bytes.Buffer
		tr := VerifyTrailer(&sizedReader{r: bytes.NewReader(stream), n: int(chunk)})
		_, err := io.Copy(&got, tr)
		if !bytes.Equal(got.Bytes(), stream) {
			t.Fatalf("passed through %d bytes, want the %d of the stream", got.Len(), len(stream))
		}

		want := len(stream) >= TrailerSize && len(stream)%512 == TrailerSize &&
			sha256.Sum256(stream[:len(stream)-TrailerSize]) == [sha256.Size]byte(stream[len(stream)-TrailerSize:])
		if seal && !flipped && !want {
			t.Fatal("a sealed stream fails etcd's own rule")
		}
		if seal && flipped && want {
			t.Fatal("a flipped bit left the stream valid") // sha256 makes this impossible
		}
		switch {
		case want && err != nil:
			t.Fatalf("valid stream rejected: %v", err)
		case !want && !errors.Is(err, ErrSnapshotIntegrity):
			t.Fatalf("invalid stream accepted: err = %v", err)
		}
		if sum, ok := tr.SHA256(); ok != want || (ok && sum != sha256.Sum256(stream)) {
			t.Fatalf("SHA256() = %x, %v", sum, ok)
		}
		if tr.Size() != int64(len(stream)) {
			t.Fatalf("Size() = %d, want %d", tr.Size(), len(stream))
		}
	})
}

// sizedReader returns reads of at most n bytes (any size when n is 0).
type sizedReader struct {
	r io.Reader
	n int
}

func (s *sizedReader) Read(p []byte) (int, error) {
	if s.n > 0 && len(p) > s.n {
		p = p[:s.n]
	}
	return s.r.Read(p)
}
