package blob

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/etcdbackup/etcdbackup/storage"
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

// filePlacement returns the directory and key prefix of the fileblob
// bucket that urlstr opens, the way fileblob's URL opener and gocloud's
// "prefix" parameter read it.
func filePlacement(urlstr string) (dir, prefix string, err error) {
	u, err := url.Parse(urlstr)
	if err != nil {
		return "", "", err
	}
	p := u.Path
	if u.Host == "." || os.PathSeparator != '/' {
		p = strings.TrimPrefix(p, "/")
	}
	dir, err = filepath.Abs(filepath.FromSlash(p))
	if err != nil {
		return "", "", fmt.Errorf("file bucket directory: %w", err)
	}
	return dir, u.Query().Get("prefix"), nil
}

// filePath returns the file that holds key (a valid key, see checkKey).
func (b *Bucket) filePath(key string) string {
	return filepath.Join(b.fileDir, filepath.FromSlash(escapeFileKey(b.filePrefix+key)))
}

// escapeFileKey is fileblob's mapping of a key to a relative path, for the
// keys storage.ValidateKey accepts: those have no control character, no
// "//", no ".." segment and no trailing slash, so two rules of fileblob's
// are left to apply: the slash after a segment that ends in ".." ("v1../")
// is escaped, and the start of any text of the form "__0x<hex>__" is
// written as its own escape sequence ("_" as "__0x5f__"), so that no key
// can pass for an escaped one. A test holds it to fileblob's placement.
func escapeFileKey(key string) string {
	if !strings.Contains(key, "__0x") && !strings.Contains(key, "../") {
		return key
	}
	runes := []rune(key)
	var sb strings.Builder
	for i, r := range runes {
		if isEscapeSequence(runes, i) || r == '/' && i > 1 && runes[i-1] == '.' && runes[i-2] == '.' {
			fmt.Fprintf(&sb, "__%#x__", r)
			continue
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// isEscapeSequence reports whether runes[i:] starts with "__0x", hex
// digits that fit an int32, and "__", which fileblob would read back as an
// escaped character.
func isEscapeSequence(runes []rune, i int) bool {
	digits, ok := strings.CutPrefix(string(runes[i:]), "__0x")
	if !ok {
		return false
	}
	end := strings.IndexByte(digits, '_')
	if end < 0 || !strings.HasPrefix(digits[end:], "__") {
		return false
	}
	_, err := strconv.ParseInt(digits[:end], 16, 32)
	return err == nil
}

// tempSuffix returns ".<16 hex digits>.tmp", a name fileblob's own
// temporary files share, which the adapter hides from List.
func tempSuffix() (string, error) {
	var b [tmpHexLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random name: %w", err)
	}
	return "." + hex.EncodeToString(b[:]) + tmpSuffix, nil
}

// relabel rewrites err's key from the temporary key to the object's.
func relabel(err error, tmpKey, key string) error {
	var se *storage.Error
	if errors.As(err, &se) && se.Key == tmpKey {
		return &storage.Error{Op: se.Op, Key: key, Err: se.Err}
	}
	return err
}
