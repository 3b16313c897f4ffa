package backup_test

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
)

// rawFile is one file of a hand-built zip: its data as stored and what
// its central directory record says.
type rawFile struct {
	name        string
	localName   string // the local header's name; name when empty
	data        []byte // as stored (deflated for the index)
	method      uint16
	flags       uint16
	crc         uint32
	size, csize uint64 // written as zip64 extra fields when >= 0xFFFFFFFF
	offset      *uint64
}

// rawZipOf returns the files of a zip archive/zip reads, with their raw
// data, for rawZip to write again after a change.
func rawZipOf(t testing.TB, archive []byte) []rawFile {
	zr, err := zip.NewReader(bytes.NewReader(archive), int64(len(archive)))
	require.NoError(t, err)
	var files []rawFile
	for _, f := range zr.File {
		rc, err := f.OpenRaw()
		require.NoError(t, err)
		data, err := io.ReadAll(rc)
		require.NoError(t, err)
		files = append(files, rawFile{name: f.Name, data: data, method: f.Method, crc: f.CRC32, size: f.UncompressedSize64, csize: f.CompressedSize64})
	}
	return files
}

// rawZip writes files as a zip, with a zip64 end when zip64 is set or
// entries (the count the end records say; len(files) when negative) does
// not fit 16 bits.
func rawZip(files []rawFile, entries int64, zip64 bool) []byte {
	le := binary.LittleEndian
	var b []byte
	offsets := make([]uint64, len(files))
	for i, f := range files {
		offsets[i] = uint64(len(b))
		local := f.localName
		if local == "" {
			local = f.name
		}
		b = le.AppendUint32(b, 0x04034b50)
		b = le.AppendUint16(b, 20)
		b = le.AppendUint16(b, f.flags)
		b = le.AppendUint16(b, f.method)
		b = le.AppendUint32(b, 0) // time, date
		b = le.AppendUint32(b, f.crc)
		b = le.AppendUint32(b, uint32(min(f.csize, 0xFFFFFFFF)))
		b = le.AppendUint32(b, uint32(min(f.size, 0xFFFFFFFF)))
		b = le.AppendUint16(b, uint16(len(local)))
		b = le.AppendUint16(b, 0)
		b = append(b, local...)
		b = append(b, f.data...)
	}
	dirAt := uint64(len(b))
	for i, f := range files {
		off := offsets[i]
		if f.offset != nil {
			off = *f.offset
		}
		var extra []byte
		field := func(v uint64) uint32 {
			if v < 0xFFFFFFFF {
				return uint32(v)
			}
			extra = le.AppendUint64(extra, v)
			return 0xFFFFFFFF
		}
		size, csize, offset := field(f.size), field(f.csize), field(off)
		if len(extra) > 0 {
			extra = append(le.AppendUint16(le.AppendUint16(nil, 1), uint16(len(extra))), extra...)
		}
		b = le.AppendUint32(b, 0x02014b50)
		b = le.AppendUint16(b, 45)
		b = le.AppendUint16(b, 45)
		b = le.AppendUint16(b, f.flags)
		b = le.AppendUint16(b, f.method)
		b = le.AppendUint32(b, 0)
		b = le.AppendUint32(b, f.crc)
		b = le.AppendUint32(b, csize)
		b = le.AppendUint32(b, size)
		b = le.AppendUint16(b, uint16(len(f.name)))
		b = le.AppendUint16(b, uint16(len(extra)))
		b = le.AppendUint16(b, 0)
		b = le.AppendUint16(b, 0)
		b = le.AppendUint16(b, 0)
		b = le.AppendUint32(b, 0)
		b = le.AppendUint32(b, offset)
		b = append(b, f.name...)
		b = append(b, extra...)
	}
	dirLen := uint64(len(b)) - dirAt
	n := uint64(entries)
	if entries < 0 {
		n = uint64(len(files))
	}
	n16 := uint16(n)
	if zip64 || n >= 0xFFFF {
		end64 := uint64(len(b))
		b = le.AppendUint32(b, 0x06064b50)
		b = le.AppendUint64(b, 44)
		b = le.AppendUint32(b, 45<<16|45)
		b = le.AppendUint64(b, 0)
		b = le.AppendUint64(b, n)
		b = le.AppendUint64(b, n)
		b = le.AppendUint64(b, dirLen)
		b = le.AppendUint64(b, dirAt)
		b = le.AppendUint32(b, 0x07064b50)
		b = le.AppendUint32(b, 0)
		b = le.AppendUint64(b, end64)
		b = le.AppendUint32(b, 1)
		n16 = 0xFFFF
	}
	b = le.AppendUint32(b, 0x06054b50)
	b = le.AppendUint32(b, 0)
	b = le.AppendUint16(b, n16)
	b = le.AppendUint16(b, n16)
	b = le.AppendUint32(b, uint32(dirLen))
	b = le.AppendUint32(b, uint32(dirAt))
	return le.AppendUint16(b, 0)
}

// readKeysZip reads archive to its end or its first error.
func readKeysZip(archive []byte, maxDecoded int64) error {
	r, err := backup.NewKeysZipReader(bytes.NewReader(archive), int64(len(archive)), maxDecoded)
	if err != nil {
		return err
	}
	defer r.Close()
	for {
		if _, err := r.Next(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

func twoKeys(t testing.TB) []rawFile {
	return rawZipOf(t, keysZip(t, backup.KeyValue{Key: []byte("/a"), Value: []byte("1"), CreateRevision: 2, ModRevision: 2, Version: 1},
		backup.KeyValue{Key: []byte("/b"), Value: []byte("2"), CreateRevision: 3, ModRevision: 3, Version: 1}))
}

// The builder writes what the reader reads: the hostile cases below
// change one thing only.
func TestKeysZipRawBuilder(t *testing.T) {
	require.NoError(t, readKeysZip(rawZip(twoKeys(t), -1, false), 1<<20))
	require.NoError(t, readKeysZip(rawZip(twoKeys(t), -1, true), 1<<20))
}

// An index whose declared size, with the values', wraps 64 bits is
// refused by maxDecoded, as any declared size beyond it is.
func TestKeysZipDeclaredSizesDoNotWrap(t *testing.T) {
	files := twoKeys(t)
	files[2].size = ^uint64(0) - 1 // with the values' 2 bytes: 2^64
	err := readKeysZip(rawZip(files, -1, false), 1<<20)
	require.ErrorIs(t, err, backup.ErrKeysZip)
	require.ErrorContains(t, err, "decodes to more than")
}

// A negative size is an error, not a panic.
func TestKeysZipNegativeSize(t *testing.T) {
	_, err := backup.NewKeysZipReader(bytes.NewReader(nil), -1, 0)
	require.ErrorIs(t, err, backup.ErrKeysZip)
}

// hostileKeysZips are archives built to mislead a reader, each of which
// must fail with ErrKeysZip (or, for ok, read the keys the index names).
func hostileKeysZips(t testing.TB) map[string][]byte {
	u64 := func(v uint64) *uint64 { return &v }
	change := func(f func(files []rawFile) []rawFile) []byte { return rawZip(f(twoKeys(t)), -1, false) }
	cases := map[string][]byte{
		"zip64 value size 2^64-1": change(func(f []rawFile) []rawFile { f[0].size = ^uint64(0); return f }),
		"zip64 value size 2^63":   change(func(f []rawFile) []rawFile { f[0].size, f[0].csize = 1<<63, 1<<63; return f }),
		"zip64 csize 2^64-1":      change(func(f []rawFile) []rawFile { f[1].csize = ^uint64(0); return f }),
		"zip64 index csize 2^63":  change(func(f []rawFile) []rawFile { f[2].csize = 1 << 63; return f }),
		"zip64 offset 2^63":       change(func(f []rawFile) []rawFile { f[1].offset = u64(1 << 63); return f }),
		"zip64 offset 2^64-1":     change(func(f []rawFile) []rawFile { f[1].offset = u64(^uint64(0)); return f }),
		"overlapping entries":     change(func(f []rawFile) []rawFile { f[1].offset = u64(0); return f }),
		"index over a value":      change(func(f []rawFile) []rawFile { f[2].offset = u64(0); return f }),
		"same name twice":         change(func(f []rawFile) []rawFile { f[1].name, f[1].localName = f[0].name, f[0].name; return f }),
		"two indexes":             change(func(f []rawFile) []rawFile { f[1].name, f[1].localName = f[2].name, f[2].name; return f }),
		"index first":             change(func(f []rawFile) []rawFile { return []rawFile{f[2], f[0], f[1]} }),
		"local name differs":      change(func(f []rawFile) []rawFile { f[0].localName = "keys/000000000-%2Fb"; return f }),
		"stored size lies":        change(func(f []rawFile) []rawFile { f[0].csize = 0; return f }),
		"deflated csize short":    change(func(f []rawFile) []rawFile { f[2].csize = 3; return f }),
		"index size short":        change(func(f []rawFile) []rawFile { f[2].size = 10; return f }),
		"encrypted":               change(func(f []rawFile) []rawFile { f[0].flags = 1; return f }),
		"method 99":               change(func(f []rawFile) []rawFile { f[0].method = 99; return f }),
		"more files than keys": change(func(f []rawFile) []rawFile {
			extra := f[1]
			extra.name = backup.KeysZipEntryName(2, []byte("/c"))
			return []rawFile{f[0], f[1], extra, f[2]}
		}),
		"fewer files than keys": change(func(f []rawFile) []rawFile { return []rawFile{f[0], f[2]} }),
		"only the index":        change(func(f []rawFile) []rawFile { return f[2:] }),
		"end counts fewer":      rawZip(twoKeys(t), 2, false),
		"end counts more":       rawZip(twoKeys(t), 4, false),
		"end counts none":       rawZip(twoKeys(t), 0, false),
		"zip64 end counts 2^63": rawZip(twoKeys(t), 1<<62, true),
		"zip64 end counts 2^64-1": func() []byte {
			b := rawZip(twoKeys(t), -1, true)
			end64 := len(b) - 22 - 20 - 56
			binary.LittleEndian.PutUint64(b[end64+24:], ^uint64(0))
			binary.LittleEndian.PutUint64(b[end64+32:], ^uint64(0))
			return b
		}(),
		"zip64 extra too long": func() []byte {
			b := change(func(f []rawFile) []rawFile { f[0].size = 1 << 32; return f })
			i := bytes.LastIndex(b, []byte("keys/000000000-%2Fa"))
			binary.LittleEndian.PutUint16(b[i+len("keys/000000000-%2Fa")+2:], 200)
			return b
		}(),
		"directory at its own end": func() []byte {
			b := rawZip(twoKeys(t), -1, false)
			binary.LittleEndian.PutUint32(b[len(b)-6:], uint32(len(b)-22))
			return b
		}(),
		"directory at the start": func() []byte {
			b := rawZip(twoKeys(t), -1, false)
			binary.LittleEndian.PutUint32(b[len(b)-6:], 0)
			return b
		}(),
		"zip64 locator at itself": func() []byte {
			b := rawZip(twoKeys(t), -1, true)
			binary.LittleEndian.PutUint64(b[len(b)-22-20+8:], uint64(len(b)-22-20))
			return b
		}(),
		"zip64 locator past the end": func() []byte {
			b := rawZip(twoKeys(t), -1, true)
			binary.LittleEndian.PutUint64(b[len(b)-22-20+8:], uint64(len(b)-10))
			return b
		}(),
	}
	return cases
}

// Hostile archives fail with ErrKeysZip: no panic, no loop, no key
// beyond those of the index.
func TestKeysZipHostileArchives(t *testing.T) {
	for what, archive := range hostileKeysZips(t) {
		t.Run(what, func(t *testing.T) {
			require.ErrorIs(t, readKeysZip(archive, 1<<20), backup.ErrKeysZip)
			require.ErrorIs(t, readKeysZip(archive, 0), backup.ErrKeysZip)
		})
	}
}

// A data descriptor flag, with the sizes in the directory only, changes
// nothing: the directory's sizes and CRC are the ones checked.
func TestKeysZipDataDescriptor(t *testing.T) {
	files := twoKeys(t)
	for i := range files {
		files[i].flags = 8
	}
	require.NoError(t, readKeysZip(rawZip(files, -1, false), 1<<20))
	files[0].crc++
	require.ErrorIs(t, readKeysZip(rawZip(files, -1, false), 1<<20), backup.ErrKeysZip)
}

// A broken index line fails with ErrKeysZip too, its KeysJSONError kept.
func TestKeysZipBrokenIndexLineIsErrKeysZip(t *testing.T) {
	var buf bytes.Buffer
	fw, err := flate.NewWriter(&buf, flate.DefaultCompression)
	require.NoError(t, err)
	index := []byte("{\"format\":\"not-keys-json\"}\n")
	_, err = fw.Write(index)
	require.NoError(t, err)
	require.NoError(t, fw.Close())
	files := twoKeys(t)
	files[2].data, files[2].csize, files[2].size, files[2].crc = buf.Bytes(), uint64(buf.Len()), uint64(len(index)), crc32.ChecksumIEEE(index)
	err = readKeysZip(rawZip(files, -1, false), 1<<20)
	require.ErrorIs(t, err, backup.ErrKeysZip)
	var line *backup.KeysJSONError
	require.ErrorAs(t, err, &line)
}
