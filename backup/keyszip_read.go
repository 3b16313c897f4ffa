package backup

import (
	"archive/zip"
	"bufio"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
)

// KeysZipReader reads a keys zip and checks it as it goes: every file is
// the one the index names at its place, its value within MaxKeysJSONLine
// and its CRC right; the index is a valid keys-json object. A reader of
// the whole archive (Next to io.EOF) has seen every file once.
//
// It reads the zip format itself rather than through archive/zip, whose
// reader loads every file's header: it walks the central directory
// record by record beside the index, and its memory does not grow with
// the number of keys.
type KeysZipReader struct {
	r       io.ReaderAt
	end     zipEnd
	dir     *bufio.Reader // the value files' records, from the next one
	rec     zipRecord     // the record read last, its buffers reused
	files   int64         // value files
	index   *KeysJSONReader
	ir      *zipFileReader // the index's bytes
	value   *zipFileReader // the value file read last, its decompressor reused
	name    []byte
	i       int64
	scratch [zipLocalLen]byte
}

// NewKeysZipReader opens the keys zip in r, of size bytes, and checks its
// directory: at most maxDecoded bytes decoded in all (zero: no bound), no
// value file larger than MaxKeysJSONLine, every file under KeysZipKeysDir
// but the index, last, and every file's data before the directory. Close
// releases the index's reader.
//
// An archive of more than MaxKeysZipEntries files, or of more than one
// file per minKeysZipEntryBytes of maxDecoded, is refused from its
// end-of-central-directory record, before the directory is read.
func NewKeysZipReader(r io.ReaderAt, size, maxDecoded int64) (*KeysZipReader, error) {
	end, err := readZipEnd(r, size, maxDecoded)
	if err != nil {
		return nil, err
	}
	z := &KeysZipReader{r: r, end: end, files: int64(end.entries) - 1}
	idx, err := z.checkDirectory(maxDecoded)
	if err != nil {
		return nil, err
	}
	z.ir = &zipFileReader{}
	if err := z.ir.open(r, idx, end.offset, &z.scratch); err != nil {
		return nil, err
	}
	if z.index, err = NewKeysJSONReader(z.ir); err != nil {
		return nil, indexError(err)
	}
	z.dir = bufio.NewReaderSize(io.NewSectionReader(r, int64(end.offset), int64(end.size)), 16<<10)
	z.value = &zipFileReader{}
	return z, nil
}

// checkDirectory reads every record of the directory once and returns
// the index's.
func (z *KeysZipReader) checkDirectory(maxDecoded int64) (*zipRecord, error) {
	dir := bufio.NewReaderSize(io.NewSectionReader(z.r, int64(z.end.offset), int64(z.end.size)), 16<<10)
	var total uint64
	for i := int64(0); i <= z.files; i++ {
		if err := z.rec.read(dir, z.end.offset); err != nil {
			return nil, err
		}
		last := i == z.files
		if err := z.rec.check(last); err != nil {
			return nil, err
		}
		// Compared before adding, so that a zip64 size near 2^64 cannot
		// wrap the total back under the bound.
		if maxDecoded > 0 && z.rec.size > uint64(maxDecoded)-total {
			return nil, &KeysZipError{Reason: fmt.Sprintf("decodes to more than %d bytes", maxDecoded)}
		}
		total += z.rec.size
	}
	idx := z.rec
	idx.name = bytes.Clone(z.rec.name)
	return &idx, nil
}

// Header returns the index's header.
func (z *KeysZipReader) Header() KeysJSONHeader { return z.index.Header() }

// Keys returns the number of keys read so far.
func (z *KeysZipReader) Keys() int64 { return z.index.Keys() }

// Complete reports whether the archive proved it complete: its index's
// end line matched, and every file was read.
func (z *KeysZipReader) Complete() bool {
	return z.index.Complete() && z.i == z.files
}

// Next returns the next key with its value, or io.EOF after the last.
func (z *KeysZipReader) Next() (KeyValue, error) {
	kv, err := z.index.Next()
	if err == io.EOF {
		// Read the index to its end, so that its CRC is checked.
		if _, err := io.Copy(io.Discard, z.ir); err != nil {
			return KeyValue{}, indexError(err)
		}
		if z.i != z.files {
			return KeyValue{}, &KeysZipError{Reason: fmt.Sprintf("the index names %d keys, the archive holds %d files", z.i, z.files)}
		}
		return KeyValue{}, io.EOF
	}
	if err != nil {
		return KeyValue{}, indexError(err)
	}
	if z.i >= z.files {
		return KeyValue{}, &KeysZipError{Reason: fmt.Sprintf("the index names more keys than the archive's %d files", z.files)}
	}
	if err := z.rec.read(z.dir, z.end.offset); err != nil {
		return KeyValue{}, err
	}
	if err := z.rec.check(false); err != nil {
		return KeyValue{}, err
	}
	z.name = appendEntryName(z.name[:0], z.i, kv.Key)
	if !bytes.Equal(z.rec.name, z.name) {
		return KeyValue{}, &KeysZipError{Entry: string(z.rec.name), Reason: fmt.Sprintf("file %d of the archive, where the index names %q", z.i, z.name)}
	}
	if err := z.value.open(z.r, &z.rec, z.end.offset, &z.scratch); err != nil {
		return KeyValue{}, err
	}
	if z.rec.size > 0 {
		kv.Value = make([]byte, z.rec.size) // at most MaxKeysJSONLine (check)
		if _, err := io.ReadFull(z.value, kv.Value); err != nil {
			return KeyValue{}, z.value.fail(err)
		}
	}
	// Read to the end, so that the size and CRC are checked: Read fails
	// past the size the directory says.
	if _, err := io.Copy(io.Discard, z.value); err != nil {
		return KeyValue{}, z.value.fail(err)
	}
	z.i++
	return kv, nil
}

// indexError returns err, an error reading the index, as one that matches
// ErrKeysZip: a read of the archive (a corrupt entry, a wrong checksum)
// fails with the zip's own errors, a broken keys-json line with a
// KeysZipError that wraps its KeysJSONError.
func indexError(err error) error {
	if errors.Is(err, ErrKeysZip) {
		return err
	}
	return &KeysZipError{Entry: KeysZipIndex, Reason: err.Error(), err: err}
}

// Close releases the decompressors.
func (z *KeysZipReader) Close() error {
	z.ir.close()
	z.value.close()
	return nil
}

// zipRecord is a central directory record, as far as a keys zip needs.
type zipRecord struct {
	flags, method uint16
	crc           uint32
	csize, size   uint64
	offset        uint64 // of the local header
	name, extra   []byte
	fixed         [zipCentralLen]byte
}

// read reads the next record of the directory dir, whose data must lie
// before dirAt.
func (e *zipRecord) read(dir *bufio.Reader, dirAt uint64) error {
	cut := func(err error) error {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return &KeysZipError{Reason: "the central directory is cut"}
		}
		return &KeysZipError{Reason: fmt.Sprintf("read the central directory: %v", err)}
	}
	b := e.fixed[:]
	if _, err := io.ReadFull(dir, b); err != nil {
		return cut(err)
	}
	le := binary.LittleEndian
	if le.Uint32(b) != zipCentralSig {
		return &KeysZipError{Reason: "not a central directory record where one should be"}
	}
	e.flags, e.method, e.crc = le.Uint16(b[8:]), le.Uint16(b[10:]), le.Uint32(b[16:])
	e.csize, e.size, e.offset = uint64(le.Uint32(b[20:])), uint64(le.Uint32(b[24:])), uint64(le.Uint32(b[42:]))
	nameLen, extraLen, commentLen := int(le.Uint16(b[28:])), int(le.Uint16(b[30:])), int(le.Uint16(b[32:]))
	e.name = slices.Grow(e.name[:0], nameLen)[:nameLen]
	e.extra = slices.Grow(e.extra[:0], extraLen)[:extraLen]
	if _, err := io.ReadFull(dir, e.name); err != nil {
		return cut(err)
	}
	if _, err := io.ReadFull(dir, e.extra); err != nil {
		return cut(err)
	}
	if _, err := dir.Discard(commentLen); err != nil {
		return cut(err)
	}
	if err := e.readZip64(); err != nil {
		return err
	}
	if e.offset >= dirAt || e.csize > dirAt-e.offset {
		return &KeysZipError{Entry: string(e.name), Reason: "data outside the archive's files"}
	}
	return nil
}

// readZip64 reads the sizes and offset of zip64's extra field, each there
// only when its 32-bit field is all ones.
func (e *zipRecord) readZip64() error {
	wide := []*uint64{&e.size, &e.csize, &e.offset}
	for x := e.extra; len(x) >= 4; {
		tag, n := binary.LittleEndian.Uint16(x), int(binary.LittleEndian.Uint16(x[2:]))
		x = x[4:]
		if n > len(x) {
			return &KeysZipError{Entry: string(e.name), Reason: "an extra field out of its record"}
		}
		field := x[:n]
		x = x[n:]
		if tag != zip64ExtraID {
			continue
		}
		for _, v := range wide {
			if *v != zipMaxUint32 {
				continue
			}
			if len(field) < 8 {
				return &KeysZipError{Entry: string(e.name), Reason: "a zip64 extra field too short"}
			}
			*v, field = binary.LittleEndian.Uint64(field), field[8:]
		}
		return nil
	}
	return nil
}

// check checks the record of a value file, or of the index (last).
func (e *zipRecord) check(last bool) error {
	fail := func(reason string) error { return &KeysZipError{Entry: string(e.name), Reason: reason} }
	switch {
	case e.flags&zipFlagEncrypted != 0:
		return fail("encrypted")
	case e.method != zip.Store && e.method != zip.Deflate:
		return fail(fmt.Sprintf("compression method %d", e.method))
	case e.method == zip.Store && e.csize != e.size:
		return fail(fmt.Sprintf("stored in %d bytes for %d", e.csize, e.size))
	case last && string(e.name) != KeysZipIndex:
		return &KeysZipError{Reason: fmt.Sprintf("the last file is not the index %s", KeysZipIndex)}
	case !last && !bytes.HasPrefix(e.name, []byte(KeysZipKeysDir)):
		return fail("not under " + KeysZipKeysDir)
	case !last && e.size > MaxKeysJSONLine:
		return fail(fmt.Sprintf("a value of %d bytes, more than %d", e.size, MaxKeysJSONLine))
	}
	return nil
}

// zipFileReader reads the data of one file of a zip, decompressed, and
// fails at its end if the data's size or CRC are not the directory's.
type zipFileReader struct {
	rec   *zipRecord
	src   io.Reader // decompressed
	fl    io.ReadCloser
	crc   uint32
	n     uint64
	local []byte // the name in the local header
}

func (f *zipFileReader) name() string { return string(f.rec.name) }

// open starts reading the file of rec, after checking its local header.
func (f *zipFileReader) open(r io.ReaderAt, rec *zipRecord, dirAt uint64, scratch *[zipLocalLen]byte) error {
	f.rec, f.crc, f.n = rec, 0, 0
	b := scratch[:]
	if _, err := r.ReadAt(b, int64(rec.offset)); err != nil {
		return f.fail(err)
	}
	le := binary.LittleEndian
	if le.Uint32(b) != zipLocalSig {
		return &KeysZipError{Entry: f.name(), Reason: "no local file header where the directory says"}
	}
	nameLen, extraLen := uint64(le.Uint16(b[26:])), uint64(le.Uint16(b[28:]))
	at := rec.offset + zipLocalLen + nameLen + extraLen
	if at > dirAt || rec.csize > dirAt-at {
		return &KeysZipError{Entry: f.name(), Reason: "data outside the archive's files"}
	}
	f.local = slices.Grow(f.local[:0], int(nameLen))[:nameLen]
	if _, err := r.ReadAt(f.local, int64(rec.offset)+zipLocalLen); err != nil {
		return f.fail(err)
	}
	if !bytes.Equal(f.local, rec.name) {
		return &KeysZipError{Entry: f.name(), Reason: fmt.Sprintf("named %q in its local header", f.local)}
	}
	data := io.NewSectionReader(r, int64(at), int64(rec.csize))
	if rec.method == zip.Store {
		f.src = data
		return nil
	}
	if f.fl == nil {
		f.fl = flate.NewReader(data)
	} else if err := f.fl.(flate.Resetter).Reset(data, nil); err != nil {
		return f.fail(err)
	}
	f.src = f.fl
	return nil
}

// Read reads decompressed data; at its end it checks size and CRC.
func (f *zipFileReader) Read(b []byte) (int, error) {
	if rest := f.rec.size - f.n; rest < uint64(len(b)) {
		b = b[:rest+1] // one more, to see a file longer than it says
	}
	n, err := f.src.Read(b)
	f.n += uint64(n)
	f.crc = crc32.Update(f.crc, crc32.IEEETable, b[:n])
	switch {
	case f.n > f.rec.size:
		return n, &KeysZipError{Entry: f.name(), Reason: fmt.Sprintf("decodes to more than the %d bytes its directory says", f.rec.size)}
	case err == io.EOF && f.n < f.rec.size:
		return n, &KeysZipError{Entry: f.name(), Reason: fmt.Sprintf("decodes to %d bytes, not the %d its directory says", f.n, f.rec.size)}
	case err == io.EOF && f.crc != f.rec.crc:
		return n, &KeysZipError{Entry: f.name(), Reason: "checksum error"}
	case err != nil && err != io.EOF:
		return n, f.fail(err)
	}
	return n, err
}

// fail returns err, an error reading the file, as one that matches
// ErrKeysZip.
func (f *zipFileReader) fail(err error) error {
	if err == nil || errors.Is(err, ErrKeysZip) {
		return err
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return &KeysZipError{Entry: f.name(), Reason: err.Error()}
}

func (f *zipFileReader) close() {
	if f != nil && f.fl != nil {
		_ = f.fl.Close()
	}
}

// MaxKeysZipEntries is the largest number of files NewKeysZipReader opens
// a keys zip with: a value file per key and the index, for a keyspace of
// some millions of keys.
const MaxKeysZipEntries = 1 << 23

// minKeysZipEntryBytes is less than the decoded bytes each key costs at
// the least: its line in the index.
const minKeysZipEntryBytes = 16

// zipEnd is what the end of a zip says of its central directory.
type zipEnd struct {
	entries, size, offset uint64
}

// readZipEnd reads the end-of-central-directory record of the zip in r
// (zip64's when there is one), and refuses more than MaxKeysZipEntries
// entries, or more than maxDecoded allows, or a directory out of the
// archive.
func readZipEnd(r io.ReaderAt, size, maxDecoded int64) (zipEnd, error) {
	if size < 0 {
		return zipEnd{}, &KeysZipError{Reason: fmt.Sprintf("a size of %d bytes", size)}
	}
	tail := make([]byte, min(size, zipEndLen+65535+zip64LocatorLen))
	if _, err := r.ReadAt(tail, size-int64(len(tail))); err != nil && err != io.EOF {
		return zipEnd{}, &KeysZipError{Reason: fmt.Sprintf("read the end of the archive: %v", err)}
	}
	at := -1
	for i := len(tail) - zipEndLen; i >= 0; i-- {
		if binary.LittleEndian.Uint32(tail[i:]) == zipEndSig {
			at = i
			break
		}
	}
	if at < 0 {
		return zipEnd{}, &KeysZipError{Reason: "no end of central directory: not a zip"}
	}
	le := binary.LittleEndian
	end := zipEnd{entries: uint64(le.Uint16(tail[at+10:])), size: uint64(le.Uint32(tail[at+12:])), offset: uint64(le.Uint32(tail[at+16:]))}
	if at >= zip64LocatorLen && le.Uint32(tail[at-zip64LocatorLen:]) == zip64LocatorSig &&
		(end.entries == zipMaxUint16 || end.size == zipMaxUint32 || end.offset == zipMaxUint32) {
		var rec [zip64EndLen]byte
		off := le.Uint64(tail[at-zip64LocatorLen+8:])
		if off > uint64(size) || uint64(size)-off < zip64EndLen {
			return zipEnd{}, &KeysZipError{Reason: "zip64 directory record out of the archive"}
		}
		if _, err := r.ReadAt(rec[:], int64(off)); err != nil {
			return zipEnd{}, &KeysZipError{Reason: fmt.Sprintf("read the zip64 directory record: %v", err)}
		}
		if le.Uint32(rec[:]) != zip64EndSig {
			return zipEnd{}, &KeysZipError{Reason: "no zip64 directory record where its locator says"}
		}
		end = zipEnd{entries: le.Uint64(rec[32:]), size: le.Uint64(rec[40:]), offset: le.Uint64(rec[48:])}
	}
	limit := uint64(MaxKeysZipEntries)
	if maxDecoded > 0 {
		limit = min(limit, uint64(maxDecoded)/minKeysZipEntryBytes+2)
	}
	switch {
	case end.entries > limit:
		return zipEnd{}, &KeysZipError{Reason: fmt.Sprintf("%d files, more than %d", end.entries, limit)}
	case end.entries == 0:
		return zipEnd{}, &KeysZipError{Reason: fmt.Sprintf("no file: the last file is not the index %s", KeysZipIndex)}
	case end.offset > uint64(size) || end.size > uint64(size)-end.offset:
		return zipEnd{}, &KeysZipError{Reason: "the central directory is cut"}
	}
	return end, nil
}
