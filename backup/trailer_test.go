package backup

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// makeStream returns a stream shaped like etcd's: dbSize pseudo-random bytes
// followed by their sha256.
func makeStream(dbSize int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	db := make([]byte, dbSize, dbSize+TrailerSize)
	for i := range db {
		db[i] = byte(r.Uint32())
	}
	sum := sha256.Sum256(db)
	return append(db, sum[:]...)
}

func drainTrailer(t *testing.T, r io.Reader) ([]byte, error) {
	t.Helper()
	var out bytes.Buffer
	_, err := io.Copy(&out, r)
	return out.Bytes(), err
}

func TestTrailerReaderValid(t *testing.T) {
	for _, dbSize := range []int{0, 512, 4096, 3 * 4096, 1 << 20} {
		stream := makeStream(dbSize, uint64(dbSize))
		tr := VerifyTrailer(bytes.NewReader(stream))
		got, err := drainTrailer(t, tr)
		require.NoError(t, err, "db of %d bytes", dbSize)
		assert.Equal(t, stream, got, "every byte, trailer included, is passed through")
		assert.True(t, tr.Verified())
		assert.EqualValues(t, len(stream), tr.Size())
		sum, ok := tr.SHA256()
		require.True(t, ok)
		assert.Equal(t, sha256.Sum256(stream), sum, "digest of the whole stream")
		trailer, ok := tr.Trailer()
		require.True(t, ok)
		assert.Equal(t, stream[len(stream)-TrailerSize:], trailer[:])

		n, err := tr.Read(make([]byte, 10))
		assert.Equal(t, 0, n)
		assert.Equal(t, io.EOF, err, "EOF is sticky")
	}
}

func TestTrailerReaderDamaged(t *testing.T) {
	valid := makeStream(8192, 1)
	flip := func(i int) []byte {
		b := bytes.Clone(valid)
		b[i] ^= 0x10
		return b
	}
	tests := []struct {
		name    string
		stream  []byte
		problem string
	}{
		{"flipped bit in first byte", flip(0), ProblemMismatch},
		{"flipped bit in middle", flip(4000), ProblemMismatch},
		{"flipped bit in last data byte", flip(8191), ProblemMismatch},
		{"flipped bit in trailer", flip(8192), ProblemMismatch},
		{"flipped bit in last trailer byte", flip(len(valid) - 1), ProblemMismatch},
		{"truncated by 1 byte", valid[:len(valid)-1], ProblemNoTrailer},
		{"truncated by 100 bytes", valid[:len(valid)-100], ProblemNoTrailer},
		{"truncated by 512 bytes", valid[:len(valid)-512], ProblemMismatch},
		{"truncated to the database", valid[:8192], ProblemNoTrailer},
		{"trailer only of the wrong data", valid[8192-TrailerSize:], ProblemNoTrailer},
		{"empty", []byte{}, ProblemShort},
		{"31 bytes", valid[:31], ProblemShort},
		{"extra byte", append(bytes.Clone(valid), 0), ProblemNoTrailer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := VerifyTrailer(bytes.NewReader(tt.stream))
			got, err := drainTrailer(t, tr)
			require.Error(t, err)
			assert.Equal(t, tt.stream, got, "bytes are passed on before the verdict")
			assert.ErrorIs(t, err, ErrSnapshotIntegrity)
			var ie *IntegrityError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, tt.problem, ie.Problem)
			assert.EqualValues(t, len(tt.stream), ie.Size)
			assert.True(t, strings.HasPrefix(err.Error(), "snapshot integrity: "), err.Error())
			assert.False(t, tr.Verified())
			_, ok := tr.SHA256()
			assert.False(t, ok)
			_, ok = tr.Trailer()
			assert.False(t, ok)

			_, again := tr.Read(make([]byte, 1))
			assert.Equal(t, err, again, "the verdict is sticky")
		})
	}
}

func TestTrailerReaderMismatchReportsDigests(t *testing.T) {
	stream := makeStream(4096, 2)
	stream[10] ^= 1
	_, err := drainTrailer(t, VerifyTrailer(bytes.NewReader(stream)))
	var ie *IntegrityError
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, stream[4096:], ie.Trailer[:])
	assert.Equal(t, sha256.Sum256(stream[:4096]), ie.Computed)
	assert.Contains(t, err.Error(), "4128 bytes")
}

// TestTrailerReaderReadShapes checks the reader against readers that split
// and end streams in every way io.Reader allows.
func TestTrailerReaderReadShapes(t *testing.T) {
	stream := makeStream(2*4096, 3)
	shapes := map[string]func(io.Reader) io.Reader{
		"whole":          func(r io.Reader) io.Reader { return r },
		"one byte":       iotest.OneByteReader,
		"halves":         iotest.HalfReader,
		"random chunks":  func(r io.Reader) io.Reader { return &chunkReader{r: r, rnd: rand.New(rand.NewPCG(1, 2))} },
		"one then 31":    func(r io.Reader) io.Reader { return &chunkReader{r: r, sizes: []int{1, 31, 32, 33, 4095}} },
		"exact trailers": func(r io.Reader) io.Reader { return &chunkReader{r: r, sizes: []int{TrailerSize}} },
	}
	for name, shape := range shapes {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, iotest.TestReader(VerifyTrailer(shape(bytes.NewReader(stream))), stream))

			damaged := bytes.Clone(stream)
			damaged[len(damaged)-40] ^= 0x80
			got, err := drainTrailer(t, VerifyTrailer(shape(bytes.NewReader(damaged))))
			assert.ErrorIs(t, err, ErrSnapshotIntegrity)
			assert.Equal(t, damaged, got)
		})
	}
}

// TestTrailerReaderDataWithEOF covers readers that return the last bytes
// together with io.EOF. (iotest.TestReader cannot drive DataErrReader: its
// zero-length read never returns.)
func TestTrailerReaderDataWithEOF(t *testing.T) {
	stream := makeStream(4096, 8)
	got, err := drainTrailer(t, VerifyTrailer(iotest.DataErrReader(bytes.NewReader(stream))))
	require.NoError(t, err)
	assert.Equal(t, stream, got)

	stream[100] ^= 4
	got, err = drainTrailer(t, VerifyTrailer(iotest.DataErrReader(bytes.NewReader(stream))))
	require.ErrorIs(t, err, ErrSnapshotIntegrity)
	assert.Equal(t, stream, got)

	// The final Read itself carries data and the verdict.
	tr := VerifyTrailer(iotest.DataErrReader(bytes.NewReader(stream[:TrailerSize])))
	n, err := tr.Read(make([]byte, 64))
	assert.Equal(t, TrailerSize, n)
	assert.ErrorIs(t, err, ErrSnapshotIntegrity)
}

func TestTrailerReaderOneByteAtATime(t *testing.T) {
	stream := makeStream(4096, 4)
	tr := VerifyTrailer(bytes.NewReader(stream))
	var got []byte
	b := make([]byte, 1)
	for {
		n, err := tr.Read(b)
		got = append(got, b[:n]...)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
	}
	assert.Equal(t, stream, got)
	assert.True(t, tr.Verified())
}

func TestTrailerReaderPassesUnderlyingErrors(t *testing.T) {
	boom := errors.New("connection reset")
	stream := makeStream(4096, 5)
	r := io.MultiReader(bytes.NewReader(stream[:1000]), iotest.ErrReader(boom))
	got, err := drainTrailer(t, VerifyTrailer(r))
	assert.Equal(t, boom, err, "returned unchanged")
	assert.NotErrorIs(t, err, ErrSnapshotIntegrity)
	assert.Equal(t, stream[:1000], got)

	tr := VerifyTrailer(iotest.TimeoutReader(bytes.NewReader(stream)))
	buf := make([]byte, 100)
	_, err = tr.Read(buf)
	require.NoError(t, err)
	_, err = tr.Read(buf)
	require.ErrorIs(t, err, iotest.ErrTimeout)
	_, err = drainTrailer(t, tr)
	require.NoError(t, err, "a transient error does not end the stream")
	assert.True(t, tr.Verified())

	n, err := VerifyTrailer(bytes.NewReader(stream)).Read(nil)
	assert.Equal(t, 0, n)
	assert.NoError(t, err)
}

func TestTrailerReaderDoesNotAllocate(t *testing.T) {
	const chunk = 4096
	stream := makeStream(200*chunk, 6)
	tr := VerifyTrailer(bytes.NewReader(stream))
	buf := make([]byte, chunk)
	allocs := testing.AllocsPerRun(150, func() {
		if _, err := tr.Read(buf); err != nil {
			panic(err)
		}
	})
	assert.Zero(t, allocs)
}

// chunkReader returns reads of the given sizes in turn, or of random sizes.
type chunkReader struct {
	r     io.Reader
	sizes []int
	i     int
	rnd   *rand.Rand
}

func (c *chunkReader) Read(p []byte) (int, error) {
	n := len(p)
	if c.rnd != nil {
		n = 1 + c.rnd.IntN(3*TrailerSize)
	} else if len(c.sizes) > 0 {
		n = c.sizes[c.i%len(c.sizes)]
		c.i++
	}
	return c.r.Read(p[:min(n, len(p))])
}

func BenchmarkTrailerReader(b *testing.B) {
	stream := makeStream(64<<20, 7)
	buf := make([]byte, 32<<10)
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		tr := VerifyTrailer(bytes.NewReader(stream))
		if _, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{tr}, buf); err != nil {
			b.Fatal(err)
		}
	}
}
