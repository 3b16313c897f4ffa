package backup

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// Sizes and offsets at and beyond 32 bits written in a directory record
// read back the same, each in a zip64 extra field only when it does not
// fit; the local header of a file of 4 GiB or more holds both sizes.
func TestKeysZipDeclaredSizesRoundTrip(t *testing.T) {
	const big = 1 << 32
	for _, e := range []zipEntry{
		{size: zipMaxUint32 - 1, csize: zipMaxUint32 - 1, offset: zipMaxUint32 - 1},
		{size: zipMaxUint32, csize: 10, offset: 5},
		{size: 7, csize: zipMaxUint32, offset: zipMaxUint32},
		{size: 5 * big, csize: 3 * big, offset: 9 * big},
		{size: 1<<63 - 1, csize: 1 << 62, offset: 1<<63 - 1},
	} {
		e.name, e.method = []byte(KeysZipIndex), zip.Deflate
		var rec zipRecord
		b := e.appendCentral(nil, 0, 0)
		require.NoError(t, rec.read(bufio.NewReader(bytes.NewReader(b)), ^uint64(0)), "%+v", e)
		require.Equal(t, [3]uint64{e.size, e.csize, uint64(e.offset)}, [3]uint64{rec.size, rec.csize, rec.offset}, "%+v", e)

		local := e.appendLocal(nil, 0, 0)
		le := binary.LittleEndian
		if e.size < zipMaxUint32 && e.csize < zipMaxUint32 {
			require.Equal(t, [2]uint32{uint32(e.csize), uint32(e.size)}, [2]uint32{le.Uint32(local[18:]), le.Uint32(local[22:])})
			continue
		}
		extra := local[zipLocalLen+len(e.name):]
		require.Equal(t, [2]uint32{zipMaxUint32, zipMaxUint32}, [2]uint32{le.Uint32(local[18:]), le.Uint32(local[22:])})
		require.Equal(t, [4]uint64{zip64ExtraID, 16, e.size, e.csize}, [4]uint64{uint64(le.Uint16(extra)), uint64(le.Uint16(extra[2:])), le.Uint64(extra[4:]), le.Uint64(extra[12:])})

	}
}
