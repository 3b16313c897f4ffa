package backup_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
)

// keysJSONObject writes a keys-json object of n keys at version.
func keysJSONObject(t testing.TB, version, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	h := backup.KeysJSONHeader{Format: backup.KeysJSONFormat, Version: version, Revision: 100,
		Prefixes: []string{"/a/"}, Created: time.Date(2026, 11, 24, 19, 0, 0, 0, time.UTC)}
	w, err := backup.NewKeysJSONWriter(&buf, h)
	require.NoError(t, err)
	for i := range n {
		require.NoError(t, w.Write(backup.KeyValue{Key: fmt.Appendf(nil, "/a/%03d", i), Value: []byte("v"), CreateRevision: 2, ModRevision: 3, Version: 1}))
	}
	require.NoError(t, w.Close())
	return buf.Bytes()
}

// readKeysJSON reads every key of obj and reports how many, whether the
// object proved complete, and the error that ended the read.
func readKeysJSON(obj []byte) (keys int64, complete bool, err error) {
	r, err := backup.NewKeysJSONReader(bytes.NewReader(obj))
	if err != nil {
		return 0, false, err
	}
	for {
		if _, err := r.Next(); err == io.EOF {
			return r.Keys(), r.Complete(), nil
		} else if err != nil {
			return r.Keys(), false, err
		}
	}
}

// TestKeysJSONTrailer: a version 2 object ends in a line that counts and
// digests what precedes it; a cut anywhere, at a line boundary included,
// fails the read. A version 1 object still reads, and says it cannot
// prove it is complete.
func TestKeysJSONTrailer(t *testing.T) {
	obj := keysJSONObject(t, backup.KeysJSONVersion, 10)
	lines := strings.Split(strings.TrimSuffix(string(obj), "\n"), "\n")
	require.Len(t, lines, 12)
	require.True(t, strings.HasPrefix(lines[11], `{"end":"keys-json","keys":10,"sha256":"`), lines[11])

	keys, complete, err := readKeysJSON(obj)
	require.NoError(t, err)
	require.EqualValues(t, 10, keys)
	require.True(t, complete)

	for cut := 1; cut < len(obj); cut++ {
		_, _, err := readKeysJSON(obj[:cut])
		require.ErrorIs(t, err, backup.ErrKeysJSON, "cut at %d of %d", cut, len(obj))
	}
	for name, body := range map[string]string{
		"other count":    strings.Replace(string(obj), `"keys":10`, `"keys":9`, 1),
		"other digest":   strings.Replace(string(obj), `"sha256":"`, `"sha256":"00`, 1),
		"a key removed":  strings.Join(append(append([]string{}, lines[:3]...), lines[4:]...), "\n") + "\n",
		"data after end": string(obj) + lines[10] + "\n",
		"second end":     string(obj) + lines[11] + "\n",
	} {
		_, _, err := readKeysJSON([]byte(body))
		require.ErrorIs(t, err, backup.ErrKeysJSON, name)
	}

	v1 := keysJSONObject(t, 1, 10)
	require.NotContains(t, string(v1), `"end"`)
	keys, complete, err = readKeysJSON(v1)
	require.NoError(t, err)
	require.EqualValues(t, 10, keys)
	require.False(t, complete, "a version 1 object proves nothing")
	v1lines := strings.SplitAfter(string(v1), "\n")
	keys, complete, err = readKeysJSON([]byte(strings.Join(v1lines[:4], "")))
	require.NoError(t, err, "a version 1 object cut at a line boundary reads as a shorter one")
	require.EqualValues(t, 3, keys)
	require.False(t, complete)
	_, _, err = readKeysJSON(append(bytes.Clone(v1), lines[11]+"\n"...))
	require.ErrorIs(t, err, backup.ErrKeysJSON, "no end line in a version 1 object")
}

// FuzzKeysJSONReader: no input panics the reader; an object that reads to
// its end at version 2 proved complete; a cut of a complete object never
// reads as complete.
func FuzzKeysJSONReader(f *testing.F) {
	f.Add(keysJSONObject(f, backup.KeysJSONVersion, 3), uint16(40))
	f.Add(keysJSONObject(f, 1, 3), uint16(100))
	f.Add(keysJSONObject(f, backup.KeysJSONVersion, 0), uint16(7))
	f.Fuzz(func(t *testing.T, obj []byte, cut uint16) {
		keys, complete, err := readKeysJSON(obj)
		if err != nil {
			if !errors.Is(err, backup.ErrKeysJSON) {
				t.Fatalf("error not matching ErrKeysJSON: %v", err)
			}
			return
		}
		r, _ := backup.NewKeysJSONReader(bytes.NewReader(obj))
		if r.Header().Version >= 2 && !complete {
			t.Fatalf("a version 2 object of %d keys read to its end without proving it complete", keys)
		}
		if !complete || len(obj) == 0 {
			return
		}
		short := obj[:int(cut)%len(obj)]
		if _, ok, err := readKeysJSON(short); err == nil || ok {
			t.Fatalf("a cut at %d of %d bytes read as complete=%v, err=%v", len(short), len(obj), ok, err)
		}
	})
}
