package backup_test

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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
	for _, b := range hostileKeysZips(f) { // zip64 fields, overlaps, counts, names
		f.Add(b)
	}
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

func TestKeysZipEntryName(t *testing.T) {
	for _, c := range []struct {
		i    int64
		key  string
		want string
	}{
		{0, "/a", "keys/000000000-%2Fa"},
		{42, "/registry/pods/ns-a/web_1", "keys/000000042-%2Fregistry%2Fpods%2Fns-a%2Fweb_1"},
		{123456789, "\x00.", "keys/123456789-%00%2E"},
		{1234567890, "x", "keys/1234567890-x"},
		{7, strings.Repeat("ab", 100), "keys/000000007-" + strings.Repeat("ab", 59)},
		{7, strings.Repeat("/", 100), "keys/000000007-" + strings.Repeat("%2F", 40)},
	} {
		assert.Equal(t, c.want, backup.KeysZipEntryName(c.i, []byte(c.key)), "key %d %q", c.i, c.key)
	}
}

// An archive of more than 65,534 files has zip64's end records; archive/zip,
// KeysZipReader and Python's zipfile read it whole.
func TestKeysZipManyKeys(t *testing.T) {
	const n = 66_000
	var kvs []backup.KeyValue
	for i := range n {
		kvs = append(kvs, backup.KeyValue{Key: fmt.Appendf(nil, "/k/%06d", i), Value: fmt.Appendf(nil, "v%d", i), CreateRevision: 2, ModRevision: 2 + int64(i%90), Version: 1})
	}
	archive := keysZip(t, kvs...)
	zr, err := zip.NewReader(bytes.NewReader(archive), int64(len(archive)))
	require.NoError(t, err)
	require.Len(t, zr.File, n+1)
	for _, i := range []int{0, n / 2, n - 1} {
		rc, err := zr.File[i].Open()
		require.NoError(t, err)
		v, err := io.ReadAll(rc)
		require.NoError(t, err)
		require.Equal(t, kvs[i].Value, v)
	}

	r, err := backup.NewKeysZipReader(bytes.NewReader(archive), int64(len(archive)), 0)
	require.NoError(t, err)
	defer r.Close()
	for i := 0; ; i++ {
		kv, err := r.Next()
		if err == io.EOF {
			require.Equal(t, n, i)
			break
		}
		if err != nil || !bytes.Equal(kv.Key, kvs[i].Key) || !bytes.Equal(kv.Value, kvs[i].Value) || kv.ModRevision != kvs[i].ModRevision {
			t.Fatalf("key %d: read %+v, %v; want %+v", i, kv, err, kvs[i])
		}
	}
	require.True(t, r.Complete())

	python, err := exec.LookPath("python3")
	if err != nil {
		t.Log("no python3: the archive is not read with zipfile")
		return
	}
	path := filepath.Join(t.TempDir(), "keys.zip")
	require.NoError(t, os.WriteFile(path, archive, 0o600))
	out, err := exec.Command(python, "-c", `import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = z.namelist()
print(len(names), z.read(names[-2]).decode(), len(z.read("keys.jsonl").splitlines()))`, path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, fmt.Sprintf("%d v%d %d\n", n+1, n-1, n+2), string(out))
}

// Archives whose directory and local headers disagree, or that point out
// of their files, fail with ErrKeysZip by the time every key is read.
func TestKeysZipInconsistentHeaders(t *testing.T) {
	valid := keysZip(t, backup.KeyValue{Key: []byte("/a"), Value: []byte("1"), CreateRevision: 2, ModRevision: 2, Version: 1},
		backup.KeyValue{Key: []byte("/b"), Value: []byte("2"), CreateRevision: 3, ModRevision: 3, Version: 1})
	first := []byte(backup.KeysZipEntryName(0, []byte("/a")))
	local := bytes.Index(valid, first)
	central := bytes.LastIndex(valid, first)
	require.Greater(t, central, local)
	mutate := func(f func(b []byte)) []byte {
		b := bytes.Clone(valid)
		f(b)
		return b
	}
	for what, archive := range map[string][]byte{
		"local name":      mutate(func(b []byte) { copy(b[local:], "../../evil/000") }),
		"offset past end": mutate(func(b []byte) { binary.LittleEndian.PutUint32(b[central-4:], uint32(len(b))) }),
		"offset into directory": mutate(func(b []byte) {
			binary.LittleEndian.PutUint32(b[central-4:], uint32(central-46))
		}),
		"encrypted": mutate(func(b []byte) { b[central-46+8] |= 1 }),
		"crc":       mutate(func(b []byte) { b[central-46+16] ^= 1 }),
		"size":      mutate(func(b []byte) { b[central-46+24]++ }),
	} {
		t.Run(what, func(t *testing.T) {
			r, err := backup.NewKeysZipReader(bytes.NewReader(archive), int64(len(archive)), 0)
			for err == nil {
				_, err = r.Next()
			}
			require.ErrorIs(t, err, backup.ErrKeysZip)
		})
	}
}

// brokenWriter fails every write.
type brokenWriter struct{}

func (brokenWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// A writer whose output fails while Close flushes what it buffered
// reports it: the object is not complete.
func TestKeyWritersCloseReportsAFailedFlush(t *testing.T) {
	h := backup.KeysJSONHeader{Format: backup.KeysJSONFormat, Version: backup.KeysJSONVersion, Revision: 100, Prefixes: []string{"/"},
		Created: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	for _, kind := range []string{backup.ManifestKindKeysJSON, backup.ManifestKindKeys} {
		w, err := backup.NewKeyWriter(brokenWriter{}, kind, h)
		require.NoError(t, err)
		require.NoError(t, w.Write(backup.KeyValue{Key: []byte("/a"), Value: []byte("1"), CreateRevision: 2, ModRevision: 2, Version: 1}), kind)
		require.ErrorContains(t, w.Close(), "disk full", kind)
	}
}

// A value the reader would refuse fails the export: an archive that
// holds it is never reported complete. A value at the bound reads back.
func TestKeysZipWriterRefusesAValueTheReaderRefuses(t *testing.T) {
	h := backup.KeysJSONHeader{Format: backup.KeysJSONFormat, Version: backup.KeysJSONVersion, Revision: 100, Prefixes: []string{"/"},
		Created: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	value := make([]byte, backup.MaxKeysJSONLine+1)
	w, err := backup.NewKeysZipWriter(io.Discard, h)
	require.NoError(t, err)
	defer w.Discard()
	require.ErrorContains(t, w.Write(backup.KeyValue{Key: []byte("/big"), Value: value, CreateRevision: 2, ModRevision: 2, Version: 1}), "more than")
	require.Error(t, w.Close())

	archive := keysZip(t, backup.KeyValue{Key: []byte("/big"), Value: value[:backup.MaxKeysJSONLine], CreateRevision: 2, ModRevision: 2, Version: 1})
	r, err := backup.NewKeysZipReader(bytes.NewReader(archive), int64(len(archive)), 0)
	require.NoError(t, err)
	defer r.Close()
	kv, err := r.Next()
	require.NoError(t, err)
	require.Len(t, kv.Value, backup.MaxKeysJSONLine)
}
