package backup_test

import (
	"archive/zip"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
)

func keysZip(t testing.TB, kvs ...backup.KeyValue) []byte {
	var buf bytes.Buffer
	w, err := backup.NewKeysZipWriter(&buf, backup.KeysJSONHeader{Format: backup.KeysJSONFormat, Version: backup.KeysJSONVersion,
		Revision: 100, Prefixes: []string{"/"}, Created: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	require.NoError(t, err)
	for _, kv := range kvs {
		require.NoError(t, w.Write(kv))
	}
	require.NoError(t, w.Close())
	return buf.Bytes()
}

// File names hold no separator or dot segment whatever the key, stay
// short, and an archive reads back with archive/zip alone and with
// KeysZipReader.
func TestKeysZipRoundTrip(t *testing.T) {
	keys := []string{"/", "/..", "/../../etc/passwd", "/a b/\x00\xff", "/" + strings.Repeat("x", 1000)}
	var kvs []backup.KeyValue
	for i, k := range keys {
		kvs = append(kvs, backup.KeyValue{Key: []byte(k), Value: []byte("value " + k), CreateRevision: int64(i + 2), ModRevision: int64(i + 2), Version: 1, Lease: int64(i)})
	}
	archive := keysZip(t, kvs...)
	zr, err := zip.NewReader(bytes.NewReader(archive), int64(len(archive)))
	require.NoError(t, err)
	require.Len(t, zr.File, len(keys)+1)
	for i, f := range zr.File[:len(keys)] {
		name := strings.TrimPrefix(f.Name, backup.KeysZipKeysDir)
		require.NotContains(t, name, "/")
		require.NotContains(t, name, ".")
		require.LessOrEqual(t, len(f.Name), 140)
		require.Equal(t, backup.KeysZipEntryName(int64(i), []byte(keys[i])), f.Name)
	}

	r, err := backup.NewKeysZipReader(bytes.NewReader(archive), int64(len(archive)), 0)
	require.NoError(t, err)
	defer r.Close()
	require.EqualValues(t, 100, r.Header().Revision)
	for _, want := range kvs {
		got, err := r.Next()
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err = r.Next()
	require.Equal(t, io.EOF, err)
	require.True(t, r.Complete())
}

// Whatever the bytes, a reader fails with a typed error or reads keys;
// it never panics.
func FuzzKeysZipReader(f *testing.F) {
	valid := keysZip(f, backup.KeyValue{Key: []byte("/a"), Value: []byte("1")}, backup.KeyValue{Key: []byte("/b"), Value: []byte("2")})
	f.Add(valid)
	f.Add(valid[:len(valid)/2])
	f.Add(valid[:len(valid)-1])
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := backup.NewKeysZipReader(bytes.NewReader(b), int64(len(b)), 1<<20)
		if err != nil {
			if !errors.Is(err, backup.ErrKeysJSON) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		defer r.Close()
		for range 1000 {
			if _, err := r.Next(); err != nil {
				if err != io.EOF && !errors.Is(err, backup.ErrKeysJSON) {
					t.Fatalf("untyped error: %v", err)
				}
				return
			}
		}
	})
}
