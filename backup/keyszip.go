package backup

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// A keys zip (backup type "keys") holds the same consistent read of etcd
// keys as a keys-json object, as a zip archive any unzip tool opens:
//
//   - one file per key, in key order, named KeysZipEntryName(i, key) (under
//     "keys/": its position and a path-safe escape of the key, cut to a
//     readable length), whose content is the key's value;
//   - last, the index KeysZipIndex: a keys-json object (KeysJSONHeader
//     with the revision, prefixes and cluster ID; one line per key with the
//     exact key, create and mod revisions, version and lease, and no value;
//     the end line with the count and sha256) whose i-th key line is the
//     i-th file.
//
// Writing streams: each value goes out as it is read, never held, and the
// index and the central directory, which a zip holds at its end, are
// spooled to temporary files until then (see KeysZipWriter): memory does
// not grow with the number of keys or the size of the values. Reading
// needs an io.ReaderAt (the archive's directory is at its end): restore
// spools a downloaded archive to a temporary file, bounded by
// Importer.MaxBytes, and reads it there.

// KeysZipIndex is the name of the index inside a keys zip.
const KeysZipIndex = "keys.jsonl"

// KeysZipKeysDir is the folder of the value files inside a keys zip.
const KeysZipKeysDir = "keys/"

// ManifestKindKeys is the Kind of the manifest of a keys zip backup. Like
// keys-json manifests, its manifests have format DeltaManifestFormat.
const ManifestKindKeys = "keys"

// ErrKeysZip matches errors about an archive that is not a keys zip this
// library wrote: unreadable, with a file the index does not name or named
// otherwise, a file in a place it should not be, or a value or archive
// larger than the bounds. Such errors match ErrKeysJSON too, so that code
// handling a broken logical backup handles both.
var ErrKeysZip = errors.New("invalid keys zip")

// KeysZipError describes what is wrong with a keys zip.
type KeysZipError struct {
	// Entry is the archive's file the error is about; empty for the
	// archive as a whole.
	Entry  string
	Reason string
}

// Error describes the problem.
func (e *KeysZipError) Error() string {
	if e.Entry == "" {
		return fmt.Sprintf("%s: %s", ErrKeysZip, e.Reason)
	}
	return fmt.Sprintf("%s: %q: %s", ErrKeysZip, e.Entry, e.Reason)
}

// Unwrap returns ErrKeysZip and ErrKeysJSON.
func (e *KeysZipError) Unwrap() []error { return []error{ErrKeysZip, ErrKeysJSON} }

// maxEntryName is how much of an escaped key a file name keeps.
const maxEntryName = 120

// KeysZipEntryName returns the name of the file of the i-th key (from
// zero): "keys/", i in nine digits at least, "-", then the key with every
// byte other than ASCII letters, digits, '_' and '-' written %XX, cut to
// maxEntryName bytes. The name is the same on every system, holds no path
// separator, dot segment or control character, and is unique by its
// position; the exact key is in the index.
func KeysZipEntryName(i int64, key []byte) string {
	return string(appendEntryName(nil, i, key))
}

// appendEntryName appends KeysZipEntryName(i, key) to b.
func appendEntryName(b []byte, i int64, key []byte) []byte {
	limit := len(b) + len(KeysZipKeysDir) + 10 + maxEntryName - 3
	b = append(b, KeysZipKeysDir...)
	n := len(b)
	b = strconv.AppendInt(b, i, 10)
	if pad := 9 - (len(b) - n); pad > 0 { // %09d
		b = append(b, "000000000"[:pad]...)
		copy(b[n+pad:], b[n:len(b)-pad])
		copy(b[n:n+pad], "000000000")
	}
	b = append(b, '-')
	const hex = "0123456789ABCDEF"
	for _, c := range key {
		if len(b) > limit {
			break
		}
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
			b = append(b, c)
		default:
			b = append(b, '%', hex[c>>4], hex[c&15])
		}
	}
	return b
}

// KeyWriter writes the keys of a logical backup: a KeysJSONWriter or a
// KeysZipWriter. Keys come in ascending byte order; Close ends the object.
type KeyWriter interface {
	Write(kv KeyValue) error
	Keys() int64
	Close() error
}

var (
	_ KeyWriter = (*KeysJSONWriter)(nil)
	_ KeyWriter = (*KeysZipWriter)(nil)
)

// NewKeyWriter starts the object of a logical backup of manifest kind
// kind on w: a keys zip for ManifestKindKeys, keys-json for
// ManifestKindKeysJSON or "".
func NewKeyWriter(w io.Writer, kind string, h KeysJSONHeader) (KeyWriter, error) {
	switch kind {
	case ManifestKindKeys:
		return NewKeysZipWriter(w, h)
	case ManifestKindKeysJSON, "":
		return NewKeysJSONWriter(w, h)
	}
	return nil, fmt.Errorf("%q is not a logical backup kind", kind)
}

// IsKeysZip reports whether b, the first bytes of an object, start a zip
// archive (a keys zip) rather than a keys-json object.
func IsKeysZip(b []byte) bool { return bytes.HasPrefix(b, []byte("PK\x03\x04")) }

// KeysZipReader reads a keys zip and checks it as it goes: every file is
// the one the index names at its place, its value within MaxKeysJSONLine
// and its CRC right; the index is a valid keys-json object. A reader of
// the whole archive (Next to io.EOF) has seen every file once.
type KeysZipReader struct {
	files []*zip.File // the value files, in order
	index *KeysJSONReader
	irc   io.ReadCloser
	i     int64
}

// NewKeysZipReader opens the keys zip in r, of size bytes, and checks its
// directory: at most maxDecoded bytes decoded in all (zero: no bound), no
// value file larger than MaxKeysJSONLine, every file under KeysZipKeysDir
// but the index, last. Close releases the index's reader.
//
// Before archive/zip loads the directory (memory in proportion to its
// entries), the end-of-central-directory record is read and an archive
// of more than MaxKeysZipEntries entries, or of more than one entry per
// minKeysZipEntryBytes of maxDecoded, is refused.
func NewKeysZipReader(r io.ReaderAt, size, maxDecoded int64) (*KeysZipReader, error) {
	if err := checkKeysZipEntries(r, size, maxDecoded); err != nil {
		return nil, err
	}
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, &KeysZipError{Reason: err.Error()}
	}
	n := len(zr.File)
	if n == 0 || zr.File[n-1].Name != KeysZipIndex {
		return nil, &KeysZipError{Reason: fmt.Sprintf("the last file is not the index %s", KeysZipIndex)}
	}
	var total uint64
	for i, f := range zr.File {
		switch {
		case f.Method != zip.Store && f.Method != zip.Deflate:
			return nil, &KeysZipError{Entry: f.Name, Reason: fmt.Sprintf("compression method %d", f.Method)}
		case i < n-1 && !strings.HasPrefix(f.Name, KeysZipKeysDir):
			return nil, &KeysZipError{Entry: f.Name, Reason: "not under " + KeysZipKeysDir}
		case i < n-1 && f.UncompressedSize64 > MaxKeysJSONLine:
			return nil, &KeysZipError{Entry: f.Name, Reason: fmt.Sprintf("a value of %d bytes, more than %d", f.UncompressedSize64, MaxKeysJSONLine)}
		}
		total += f.UncompressedSize64
		if maxDecoded > 0 && total > uint64(maxDecoded) {
			return nil, &KeysZipError{Reason: fmt.Sprintf("decodes to more than %d bytes", maxDecoded)}
		}
	}
	irc, err := zr.File[n-1].Open()
	if err != nil {
		return nil, &KeysZipError{Entry: KeysZipIndex, Reason: err.Error()}
	}
	index, err := NewKeysJSONReader(irc)
	if err != nil {
		irc.Close()
		return nil, indexError(err)
	}
	return &KeysZipReader{files: zr.File[:n-1], index: index, irc: irc}, nil
}

// Header returns the index's header.
func (z *KeysZipReader) Header() KeysJSONHeader { return z.index.Header() }

// Keys returns the number of keys read so far.
func (z *KeysZipReader) Keys() int64 { return z.index.Keys() }

// Complete reports whether the archive proved it complete: its index's
// end line matched, and every file was read.
func (z *KeysZipReader) Complete() bool {
	return z.index.Complete() && z.i == int64(len(z.files))
}

// Next returns the next key with its value, or io.EOF after the last.
func (z *KeysZipReader) Next() (KeyValue, error) {
	kv, err := z.index.Next()
	if err == io.EOF {
		// Read the index to its end, so that its CRC is checked.
		if _, err := io.Copy(io.Discard, z.irc); err != nil {
			return KeyValue{}, &KeysZipError{Entry: KeysZipIndex, Reason: err.Error()}
		}
		if z.i != int64(len(z.files)) {
			return KeyValue{}, &KeysZipError{Reason: fmt.Sprintf("the index names %d keys, the archive holds %d files", z.i, len(z.files))}
		}
		return KeyValue{}, io.EOF
	}
	if err != nil {
		return KeyValue{}, indexError(err)
	}
	if z.i >= int64(len(z.files)) {
		return KeyValue{}, &KeysZipError{Reason: fmt.Sprintf("the index names more keys than the archive's %d files", len(z.files))}
	}
	f := z.files[z.i]
	if want := KeysZipEntryName(z.i, kv.Key); f.Name != want {
		return KeyValue{}, &KeysZipError{Entry: f.Name, Reason: fmt.Sprintf("file %d of the archive, where the index names %q", z.i, want)}
	}
	rc, err := f.Open()
	if err != nil {
		return KeyValue{}, &KeysZipError{Entry: f.Name, Reason: err.Error()}
	}
	defer rc.Close()
	// archive/zip fails a file that decodes to more or less than its
	// directory says, or to another CRC, at its end.
	value, err := io.ReadAll(io.LimitReader(rc, MaxKeysJSONLine+1))
	if err != nil {
		return KeyValue{}, &KeysZipError{Entry: f.Name, Reason: err.Error()}
	}
	if len(value) > MaxKeysJSONLine {
		return KeyValue{}, &KeysZipError{Entry: f.Name, Reason: fmt.Sprintf("a value of more than %d bytes", MaxKeysJSONLine)}
	}
	if len(value) > 0 {
		kv.Value = value
	}
	z.i++
	return kv, nil
}

// indexError returns err, an error reading the index, as one that matches
// ErrKeysZip: a read of the archive (a corrupt entry, a wrong checksum)
// fails with archive/zip's own errors.
func indexError(err error) error {
	if errors.Is(err, ErrKeysJSON) {
		return err
	}
	return &KeysZipError{Entry: KeysZipIndex, Reason: err.Error()}
}

// Close releases the index's reader.
func (z *KeysZipReader) Close() error { return z.irc.Close() }

// MaxKeysZipEntries is the largest number of files NewKeysZipReader opens
// a keys zip with: a value file per key and the index, for a keyspace of
// some millions of keys.
const MaxKeysZipEntries = 1 << 23

// minKeysZipEntryBytes is less than the decoded bytes each key costs at
// the least: its line in the index.
const minKeysZipEntryBytes = 16

// checkKeysZipEntries reads the entry count of the zip in r from its
// end-of-central-directory record (zip64's when there is one) and refuses
// more than MaxKeysZipEntries, or more than maxDecoded allows.
func checkKeysZipEntries(r io.ReaderAt, size, maxDecoded int64) error {
	const eocdLen, locatorLen, maxComment = 22, 20, 65535
	tail := make([]byte, min(size, eocdLen+maxComment+locatorLen))
	if _, err := r.ReadAt(tail, size-int64(len(tail))); err != nil && err != io.EOF {
		return &KeysZipError{Reason: fmt.Sprintf("read the end of the archive: %v", err)}
	}
	at := -1
	for i := len(tail) - eocdLen; i >= 0; i-- {
		if binary.LittleEndian.Uint32(tail[i:]) == 0x06054b50 {
			at = i
			break
		}
	}
	if at < 0 {
		return &KeysZipError{Reason: "no end of central directory: not a zip"}
	}
	entries := uint64(binary.LittleEndian.Uint16(tail[at+10:]))
	if entries == 0xffff && at >= locatorLen && binary.LittleEndian.Uint32(tail[at-locatorLen:]) == 0x07064b50 {
		var rec [56]byte
		off := int64(binary.LittleEndian.Uint64(tail[at-locatorLen+8:]))
		if off < 0 || off > size-int64(len(rec)) {
			return &KeysZipError{Reason: "zip64 directory record out of the archive"}
		}
		if _, err := r.ReadAt(rec[:], off); err != nil {
			return &KeysZipError{Reason: fmt.Sprintf("read the zip64 directory record: %v", err)}
		}
		entries = binary.LittleEndian.Uint64(rec[32:])
	}
	limit := uint64(MaxKeysZipEntries)
	if maxDecoded > 0 {
		limit = min(limit, uint64(maxDecoded)/minKeysZipEntryBytes+2)
	}
	if entries > limit {
		return &KeysZipError{Reason: fmt.Sprintf("%d files, more than %d", entries, limit)}
	}
	return nil
}
