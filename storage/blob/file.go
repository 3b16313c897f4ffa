package blob

import (
	"path"
	"strings"
)

// fileblob keeps two kinds of files of its own beside the objects:
//
//   - "<key>.attrs" sidecars holding content type and metadata (unless the
//     bucket was opened with metadata=skip). fileblob refuses keys with that
//     suffix and hides such files from List itself.
//   - "<name>.<16 hex digits>.tmp" files that Put writes before renaming
//     them over the key: in os.TempDir by default, next to the object with
//     no_tmp_dir (Options.NoTempDir). fileblob removes them when a write
//     fails, but lists them while a write is in flight, and a process that
//     dies mid-write strands them.
//
// The adapter refuses both kinds of names as keys and hides them from List,
// so that no object can be mistaken for them and they never show.

const (
	attrsSuffix = ".attrs"
	tmpSuffix   = ".tmp"
	tmpHexLen   = 16 // time.Now().UnixNano() in hex, from 2006 to 2262
)

// fileReserved says why key names a file of fileblob's own, or "".
func fileReserved(key string) string {
	switch {
	case strings.HasSuffix(key, attrsSuffix):
		return `fileblob keeps metadata in files ending in ".attrs"`
	case isFileblobTemp(key):
		return `fileblob writes temporary files named "<name>.<16 hex digits>.tmp"`
	}
	return ""
}

// isFileblobTemp reports whether the last segment of key looks like a
// temporary file of fileblob.
func isFileblobTemp(key string) bool {
	name, ok := strings.CutSuffix(path.Base(key), tmpSuffix)
	if !ok {
		return false
	}
	dot := len(name) - tmpHexLen - 1
	if dot < 0 || name[dot] != '.' {
		return false
	}
	for _, c := range name[dot+1:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
