package backup_test

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
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
