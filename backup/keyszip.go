package backup

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
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
	err    error // the index's KeysJSONError, if that is the cause
}

// Error describes the problem.
func (e *KeysZipError) Error() string {
	if e.Entry == "" {
		return fmt.Sprintf("%s: %s", ErrKeysZip, e.Reason)
	}
	return fmt.Sprintf("%s: %q: %s", ErrKeysZip, e.Entry, e.Reason)
}

// Unwrap returns ErrKeysZip and ErrKeysJSON, and for a broken line of the
// index its KeysJSONError.
func (e *KeysZipError) Unwrap() []error {
	if e.err != nil {
		return []error{ErrKeysZip, ErrKeysJSON, e.err}
	}
	return []error{ErrKeysZip, ErrKeysJSON}
}

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
