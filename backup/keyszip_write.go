package backup

import (
	"archive/zip"
	"bufio"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"
)

// KeysZipWriter writes a keys zip. Keys must come in ascending byte order.
//
// It writes the zip format itself rather than through archive/zip, whose
// writer holds every file's header until its end: the index (deflated as
// it is written) and the central directory records of the value files
// are spooled to two temporary files of the system's temporary folder
// (os.TempDir, $TMPDIR), removed as soon as they are created where the
// system allows it, and copied into the archive by Close. Memory stays
// flat whatever the number of keys (buffers of about 1 MiB, most of it
// the index's compressor); the disk holds, per key, its directory record
// (46 bytes and the file name) and its deflated index line, until Close
// or Discard.
type KeysZipWriter struct {
	out     *bufio.Writer
	off     int64 // bytes written to out
	kw      *KeysJSONWriter
	isum    *crcWriter // the index as written, before deflate
	fw      *flate.Writer
	index   *spool // the deflated index
	dir     *spool // central directory records of the value files
	modTime uint16
	modDate uint16
	name    []byte // the file name being written, reused
	buf     []byte // the record being written, reused
	err     error
}

// NewKeysZipWriter starts a keys zip of the keys h describes on w. The
// writer holds two temporary files until Close or Discard.
func NewKeysZipWriter(w io.Writer, h KeysJSONHeader) (*KeysZipWriter, error) {
	z := &KeysZipWriter{out: bufio.NewWriterSize(w, 64<<10)}
	z.modDate, z.modTime = msDosTime(h.Created)
	var err error
	if z.index, err = newSpool(); err != nil {
		return nil, err
	}
	if z.dir, err = newSpool(); err != nil {
		z.index.release()
		return nil, err
	}
	// Deflated as archive/zip deflates; never fails at this level.
	z.fw, _ = flate.NewWriter(z.index, flate.DefaultCompression)
	z.isum = &crcWriter{w: z.fw}
	if z.kw, err = NewKeysJSONWriter(z.isum, h); err != nil {
		z.Discard()
		return nil, err
	}
	return z, nil
}

// Write writes the file of one key and records it in the index. A value
// of more than MaxKeysJSONLine bytes fails it, as KeysZipReader would
// refuse the archive.
func (z *KeysZipWriter) Write(kv KeyValue) error {
	if z.err != nil {
		return z.err
	}
	if len(kv.Value) > MaxKeysJSONLine {
		// KeysZipReader refuses it: an archive holding it could never
		// be imported.
		return z.fail(fmt.Errorf("keys zip: key %q: a value of %d bytes, more than %d", kv.Key, len(kv.Value), MaxKeysJSONLine))
	}
	i := z.kw.Keys()
	meta := kv
	meta.Value = nil
	if err := z.kw.Write(meta); err != nil {
		return z.fail(err)
	}
	z.name = appendEntryName(z.name[:0], i, kv.Key)
	// Stored, not deflated: the pipeline compresses the whole stream.
	e := zipEntry{name: z.name, method: zip.Store, crc: crc32.ChecksumIEEE(kv.Value),
		size: uint64(len(kv.Value)), csize: uint64(len(kv.Value)), offset: z.off}
	z.buf = e.appendLocal(z.buf[:0], z.modTime, z.modDate)
	if err := z.write(z.buf); err != nil {
		return err
	}
	if err := z.write(kv.Value); err != nil {
		return err
	}
	z.buf = e.appendCentral(z.buf[:0], z.modTime, z.modDate)
	if _, err := z.dir.Write(z.buf); err != nil {
		return z.fail(err)
	}
	return nil
}

// Keys returns the number of keys written.
func (z *KeysZipWriter) Keys() int64 { return z.kw.Keys() }

// Close writes the index and the archive's directory, and removes the
// temporary files. It does not close the underlying writer.
func (z *KeysZipWriter) Close() error {
	if z.err != nil {
		return z.err
	}
	defer z.Discard()
	if err := z.kw.Close(); err != nil {
		return z.fail(err)
	}
	if err := z.fw.Close(); err != nil {
		return z.fail(fmt.Errorf("keys zip: index: %w", err))
	}
	if err := z.index.flush(); err != nil {
		return z.fail(err)
	}
	idx := zipEntry{name: []byte(KeysZipIndex), method: zip.Deflate, crc: z.isum.crc,
		size: uint64(z.isum.n), csize: uint64(z.index.n), offset: z.off}
	z.buf = idx.appendLocal(z.buf[:0], z.modTime, z.modDate)
	if err := z.write(z.buf); err != nil {
		return err
	}
	if err := z.copy(z.index); err != nil {
		return err
	}
	dirAt := z.off
	if err := z.dir.flush(); err != nil {
		return z.fail(err)
	}
	if err := z.copy(z.dir); err != nil {
		return err
	}
	z.buf = idx.appendCentral(z.buf[:0], z.modTime, z.modDate)
	z.buf = appendZipEnd(z.buf, uint64(z.Keys())+1, z.off+int64(len(z.buf))-dirAt, dirAt)
	if err := z.write(z.buf); err != nil {
		return err
	}
	if err := z.out.Flush(); err != nil {
		return z.fail(fmt.Errorf("keys zip: %w", err))
	}
	z.err = errWriterClosed
	return nil
}

// Discard removes the temporary files of a writer that will not be
// closed (an export that failed); nothing more can be written. It does
// nothing after Close.
func (z *KeysZipWriter) Discard() {
	if z.err == nil {
		z.err = errWriterClosed
	}
	z.index.release()
	z.dir.release()
}

func (z *KeysZipWriter) fail(err error) error {
	z.err = err
	return err
}

// write writes b to the archive.
func (z *KeysZipWriter) write(b []byte) error {
	n, err := z.out.Write(b)
	z.off += int64(n)
	if err != nil {
		return z.fail(fmt.Errorf("keys zip: %w", err))
	}
	return nil
}

// copy copies the spool s, flushed, into the archive.
func (z *KeysZipWriter) copy(s *spool) error {
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return z.fail(fmt.Errorf("keys zip: spool: %w", err))
	}
	n, err := io.Copy(z.out, s.f)
	z.off += n
	switch {
	case err != nil:
		return z.fail(fmt.Errorf("keys zip: %w", err))
	case n != s.n:
		return z.fail(fmt.Errorf("keys zip: spool: read %d bytes of %d", n, s.n))
	}
	return nil
}

// spool is a temporary file that holds records until the archive's end.
type spool struct {
	f       *os.File
	w       *bufio.Writer
	n       int64 // bytes written
	removed bool  // the file's name is gone already
	closed  bool
}

func newSpool() (*spool, error) {
	f, err := os.CreateTemp("", "etcdbackup-keyszip-*")
	if err != nil {
		return nil, fmt.Errorf("keys zip: temporary file (os.TempDir, $TMPDIR): %w", err)
	}
	// Where the system allows it (not Windows), the file lives on without
	// a name until closed, so that nothing is left behind a crash.
	removed := os.Remove(f.Name()) == nil
	return &spool{f: f, w: bufio.NewWriterSize(f, 32<<10), removed: removed}, nil
}

// Write writes p to the file; an error names the temporary folder, so
// that a full $TMPDIR reads as such whichever spool and path it reaches
// the caller through (the index's comes through its compressor).
func (s *spool) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	s.n += int64(n)
	return n, s.wrap(err)
}

func (s *spool) flush() error { return s.wrap(s.w.Flush()) }

func (s *spool) wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("keys zip: temporary file in %s (os.TempDir, $TMPDIR): %w", filepath.Dir(s.f.Name()), err)
}

func (s *spool) release() {
	if s == nil || s.closed {
		return
	}
	s.closed = true
	_ = s.f.Close()
	if !s.removed {
		_ = os.Remove(s.f.Name())
	}
}

// crcWriter writes to w, and sums and counts what it writes.
type crcWriter struct {
	w   io.Writer
	crc uint32
	n   int64
}

func (c *crcWriter) Write(p []byte) (int, error) {
	c.crc = crc32.Update(c.crc, crc32.IEEETable, p)
	c.n += int64(len(p))
	return c.w.Write(p)
}

// msDosTime returns t's MS-DOS date and time, as archive/zip writes them;
// a time before 1980 is 1980-01-01.
func msDosTime(t time.Time) (date, tm uint16) {
	if t.Year() < 1980 {
		return 1<<5 | 1, 0
	}
	date = uint16(t.Day() + int(t.Month())<<5 + (t.Year()-1980)<<9)
	tm = uint16(t.Second()/2 + t.Minute()<<5 + t.Hour()<<11)
	return date, tm
}

// Signatures and versions of the zip format (APPNOTE.TXT).
const (
	zipLocalSig       = 0x04034b50
	zipCentralSig     = 0x02014b50
	zipEndSig         = 0x06054b50
	zip64EndSig       = 0x06064b50
	zip64LocatorSig   = 0x07064b50
	zipVersion20      = 20
	zipVersion45      = 45 // zip64
	zip64ExtraID      = 0x0001
	zipLocalLen       = 30
	zipCentralLen     = 46
	zipEndLen         = 22
	zip64EndLen       = 56
	zip64LocatorLen   = 20
	zipFlagEncrypted  = 0x1
	zipMaxUint16      = math.MaxUint16
	zipMaxUint32      = math.MaxUint32
	zipNoExtraVersion = zipVersion20
)

// zipEntry is what the zip format records of one file.
type zipEntry struct {
	name        []byte
	method      uint16
	crc         uint32
	csize, size uint64
	offset      int64
}

// appendLocal appends e's local file header: its sizes are known before
// its data, so it has no data descriptor.
func (e *zipEntry) appendLocal(b []byte, tm, date uint16) []byte {
	le := binary.LittleEndian
	big := e.size >= zipMaxUint32 || e.csize >= zipMaxUint32
	version, csize, size, extra := uint16(zipNoExtraVersion), uint32(e.csize), uint32(e.size), uint16(0)
	if big {
		version, csize, size, extra = zipVersion45, zipMaxUint32, zipMaxUint32, 20
	}
	b = le.AppendUint32(b, zipLocalSig)
	b = le.AppendUint16(b, version)
	b = le.AppendUint16(b, 0) // flags
	b = le.AppendUint16(b, e.method)
	b = le.AppendUint16(b, tm)
	b = le.AppendUint16(b, date)
	b = le.AppendUint32(b, e.crc)
	b = le.AppendUint32(b, csize)
	b = le.AppendUint32(b, size)
	b = le.AppendUint16(b, uint16(len(e.name)))
	b = le.AppendUint16(b, extra)
	b = append(b, e.name...)
	if big {
		b = le.AppendUint16(b, zip64ExtraID)
		b = le.AppendUint16(b, 16)
		b = le.AppendUint64(b, e.size)
		b = le.AppendUint64(b, e.csize)
	}
	return b
}

// appendCentral appends e's central directory record, with a zip64 extra
// field for the sizes and offset that do not fit 32 bits.
func (e *zipEntry) appendCentral(b []byte, tm, date uint16) []byte {
	le := binary.LittleEndian
	var wide []uint64
	size, csize, offset := uint32(e.size), uint32(e.csize), uint32(e.offset)
	if e.size >= zipMaxUint32 {
		size, wide = zipMaxUint32, append(wide, e.size)
	}
	if e.csize >= zipMaxUint32 {
		csize, wide = zipMaxUint32, append(wide, e.csize)
	}
	if e.offset >= zipMaxUint32 {
		offset, wide = zipMaxUint32, append(wide, uint64(e.offset))
	}
	version := uint16(zipNoExtraVersion)
	if len(wide) > 0 {
		version = zipVersion45
	}
	b = le.AppendUint32(b, zipCentralSig)
	b = le.AppendUint16(b, version) // made by (MS-DOS)
	b = le.AppendUint16(b, version) // needed
	b = le.AppendUint16(b, 0)       // flags
	b = le.AppendUint16(b, e.method)
	b = le.AppendUint16(b, tm)
	b = le.AppendUint16(b, date)
	b = le.AppendUint32(b, e.crc)
	b = le.AppendUint32(b, csize)
	b = le.AppendUint32(b, size)
	b = le.AppendUint16(b, uint16(len(e.name)))
	if len(wide) > 0 {
		b = le.AppendUint16(b, uint16(4+8*len(wide)))
	} else {
		b = le.AppendUint16(b, 0)
	}
	b = le.AppendUint16(b, 0) // comment
	b = le.AppendUint16(b, 0) // disk
	b = le.AppendUint16(b, 0) // internal attributes
	b = le.AppendUint32(b, 0) // external attributes
	b = le.AppendUint32(b, offset)
	b = append(b, e.name...)
	if len(wide) > 0 {
		b = le.AppendUint16(b, zip64ExtraID)
		b = le.AppendUint16(b, uint16(8*len(wide)))
		for _, v := range wide {
			b = le.AppendUint64(b, v)
		}
	}
	return b
}

// appendZipEnd appends the end of central directory record of a
// directory of records entries, size bytes at offset, preceded by zip64's
// end record and locator when a count or size does not fit.
func appendZipEnd(b []byte, records uint64, size, offset int64) []byte {
	le := binary.LittleEndian
	records16, size32, offset32 := uint16(records), uint32(size), uint32(offset)
	if records >= zipMaxUint16 || size >= zipMaxUint32 || offset >= zipMaxUint32 {
		b = le.AppendUint32(b, zip64EndSig)
		b = le.AppendUint64(b, zip64EndLen-12) // the record's size after this field
		b = le.AppendUint16(b, zipVersion45)
		b = le.AppendUint16(b, zipVersion45)
		b = le.AppendUint32(b, 0) // disk
		b = le.AppendUint32(b, 0) // directory's disk
		b = le.AppendUint64(b, records)
		b = le.AppendUint64(b, records)
		b = le.AppendUint64(b, uint64(size))
		b = le.AppendUint64(b, uint64(offset))
		b = le.AppendUint32(b, zip64LocatorSig)
		b = le.AppendUint32(b, 0)                           // disk
		b = le.AppendUint64(b, uint64(offset)+uint64(size)) // the zip64 end record
		b = le.AppendUint32(b, 1)                           // disks
		records16, size32, offset32 = zipMaxUint16, zipMaxUint32, zipMaxUint32
	}
	b = le.AppendUint32(b, zipEndSig)
	b = le.AppendUint16(b, 0) // disk
	b = le.AppendUint16(b, 0) // directory's disk
	b = le.AppendUint16(b, records16)
	b = le.AppendUint16(b, records16)
	b = le.AppendUint32(b, size32)
	b = le.AppendUint32(b, offset32)
	return le.AppendUint16(b, 0) // comment
}
