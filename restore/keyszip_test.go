package restore_test

import (
	"archive/zip"
	"bufio"
	"bytes"
	"compress/flate"
	"encoding/base64"
	"encoding/json"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/restore"
)

// readZipAlone reads a keys zip knowing only its documented layout, with
// archive/zip and encoding/json alone, as another tool would: the index's
// i-th key line is the i-th file. It returns the header and every key's
// value.
func readZipAlone(t *testing.T, path string) (map[string]any, map[string][]byte) {
	t.Helper()
	zr, err := zip.OpenReader(path)
	require.NoError(t, err)
	defer zr.Close()
	index, err := zr.Open(backup.KeysZipIndex)
	require.NoError(t, err)
	defer index.Close()
	sc := bufio.NewScanner(index)
	sc.Buffer(make([]byte, 1<<20), 32<<20)
	require.True(t, sc.Scan())
	var header map[string]any
	require.NoError(t, json.Unmarshal(sc.Bytes(), &header))
	values := map[string][]byte{}
	for i := 0; sc.Scan(); i++ {
		if bytes.HasPrefix(sc.Bytes(), []byte(`{"end":`)) {
			break
		}
		var line struct{ Key string }
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
		key, err := base64.StdEncoding.DecodeString(line.Key)
		require.NoError(t, err)
		f, err := zr.File[i].Open()
		require.NoError(t, err)
		v, err := io.ReadAll(f)
		require.NoError(t, err)
		values[string(key)] = v
	}
	require.NoError(t, sc.Err())
	return header, values
}

// readZipPython reads a keys zip with Python's zipfile, when python3 is
// installed, and returns every key's value.
func readZipPython(t *testing.T, path string) (map[string][]byte, bool) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		return nil, false
	}
	script := `
import base64, json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = z.namelist()
lines = z.read("keys.jsonl").decode().splitlines()
out = {}
for i, line in enumerate(lines[1:-1]):
    kv = json.loads(line)
    out[kv["key"]] = base64.b64encode(z.read(names[i])).decode()
print(json.dumps(out))
`
	out, err := exec.CommandContext(t.Context(), "python3", "-c", script, path).Output()
	require.NoError(t, err)
	var enc map[string]string
	require.NoError(t, json.Unmarshal(out, &enc))
	values := map[string][]byte{}
	for k, v := range enc {
		key, err := base64.StdEncoding.DecodeString(k)
		require.NoError(t, err)
		val, err := base64.StdEncoding.DecodeString(v)
		require.NoError(t, err)
		values[string(key)] = val
	}
	return values, true
}

// TestKeysZipExportImport exports two prefixes of a real etcd as a keys
// zip, reads it back with archive/zip (and Python) alone, imports it into
// an empty etcd, and finds there exactly the keys of the prefixes at the
// export's revision.
func TestKeysZipExportImport(t *testing.T) {
	ctx := t.Context()
	src := etcdtest.Start(t, etcdtest.WithName("source"))
	sc := src.Client(t)
	chosen := []string{"/registry/namespaces/", "/registry/configmaps/ns-a/"}
	fillKeys(t, sc, chosen, 500, "v1")
	fillKeys(t, sc, []string{"/registry/configmaps/ns-b/", "/registry/pods/"}, 500, "v1")
	// Keys no file system would take as they are.
	for _, k := range []string{"/registry/namespaces/../../../etc/passwd", "/registry/namespaces/\x00\xff\n", "/registry/configmaps/ns-a/" + strings.Repeat("long/", 100)} {
		_, err := sc.Put(ctx, k, "odd "+k)
		require.NoError(t, err)
	}
	_, err := sc.Put(ctx, "/registry/namespaces/empty", "")
	require.NoError(t, err)

	b := memBucket(t)
	p := &backup.Pipeline{Snapshotter: &backup.KeysExporter{Client: sc, Prefixes: chosen, Kind: backup.ManifestKindKeys}, Compression: backup.Zstd}
	res, err := p.Run(ctx, backup.Request{Cluster: "prod-a", Name: "keys", Kind: backup.ManifestKindKeys,
		Targets: []backup.Target{{Destination: "dest", Uploader: &backup.BucketUploader{Bucket: b}}}})
	require.NoError(t, err)
	rev := res.Snapshot.RevisionLow
	// Writes after the export are not in it.
	fillKeys(t, sc, chosen, 10, "v2")
	want := keysAt(t, sc, chosen, rev)
	require.Len(t, want, 1004)

	found, err := restore.Find(ctx, []restore.Source{{Name: "dest", Catalog: b}}, restore.Query{Cluster: "prod-a", Kind: backup.KindKeysJSON})
	require.NoError(t, err)
	require.Equal(t, backup.KindKeys, found.Kind)
	path := filepath.Join(t.TempDir(), "keys.zip")
	r := &restore.Restorer{TempDir: t.TempDir()}
	fetched, err := r.Fetch(ctx, found, path)
	require.NoError(t, err)

	header, values := readZipAlone(t, path)
	require.EqualValues(t, rev, header["revision"])
	require.Len(t, values, len(want))
	for k, kv := range want {
		require.Equal(t, string(kv.Value), string(values[k]), k)
	}
	if py, ok := readZipPython(t, path); ok {
		require.Equal(t, values, py)
	} else {
		t.Log("python3 not found: read with archive/zip only")
	}

	dst := etcdtest.Start(t, etcdtest.WithName("target"))
	dc := dst.Client(t)
	im := &restore.Importer{Client: dc, ManifestChecked: fetched.ManifestChecked, TempDir: t.TempDir()}
	dry := *im
	dry.DryRun = true
	got, err := dry.ImportFile(ctx, path)
	require.NoError(t, err)
	require.EqualValues(t, len(want), got.Created)
	requireKeyCount(t, dc, 0)

	got, err = im.ImportFile(ctx, path)
	require.NoError(t, err)
	require.EqualValues(t, len(want), got.Created)
	require.Equal(t, rev, got.Revision)
	require.True(t, got.Complete)
	imported := keysAt(t, dc, chosen, 0)
	require.Len(t, imported, len(want))
	for k, kv := range want {
		require.Equal(t, string(kv.Value), string(imported[k].Value), k)
	}

	// Selected and moved: only the namespaces, under another prefix,
	// read through Import's spool.
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	moved := &restore.Importer{Client: dc, TempDir: t.TempDir(), Mapping: restore.KeyMapping{
		Prefixes: []string{"/registry/namespaces/"}, StripPrefix: "/registry/", AddPrefix: "/copy/"}}
	got, err = moved.Import(ctx, f)
	require.NoError(t, err)
	require.EqualValues(t, 503, got.Created)
	require.Len(t, keysAt(t, dc, []string{"/copy/"}, 0), 503)

	// Diff: the backup against the live source shows the later writes.
	from, _, c, err := restore.OpenKeysFile(path, restore.KeyMapping{}, 0)
	require.NoError(t, err)
	defer c.Close()
	changed := 0
	require.NoError(t, restore.Diff(ctx, from, restore.NewEtcdKeys(sc, chosen), func(ch restore.KeyChange) error {
		changed++
		return nil
	}))
	require.Equal(t, 20, changed)
}

func requireKeyCount(t *testing.T, c *clientv3.Client, n int64) {
	t.Helper()
	resp, err := c.Get(t.Context(), "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
	require.NoError(t, err)
	require.Equal(t, n, resp.Count)
}

// zipFile is one file of a hand-made archive.
type zipFile struct {
	name string
	data []byte
	// declared, when set, is the decoded size the directory claims.
	declared uint64
}

// handZip writes an archive of files and, unless index is nil, the index
// last.
func handZip(t *testing.T, files []zipFile, index []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	add := func(f zipFile) {
		if f.declared == 0 {
			w, err := zw.CreateHeader(&zip.FileHeader{Name: f.name, Method: zip.Deflate})
			require.NoError(t, err)
			_, err = w.Write(f.data)
			require.NoError(t, err)
			return
		}
		var deflated bytes.Buffer
		fw, err := flate.NewWriter(&deflated, flate.BestCompression)
		require.NoError(t, err)
		_, err = fw.Write(f.data)
		require.NoError(t, err)
		require.NoError(t, fw.Close())
		w, err := zw.CreateRaw(&zip.FileHeader{Name: f.name, Method: zip.Deflate, CRC32: crc32.ChecksumIEEE(f.data),
			CompressedSize64: uint64(deflated.Len()), UncompressedSize64: f.declared})
		require.NoError(t, err)
		_, err = w.Write(deflated.Bytes())
		require.NoError(t, err)
	}
	for _, f := range files {
		add(f)
	}
	if index != nil {
		add(zipFile{name: backup.KeysZipIndex, data: index})
	}
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// indexOf is the index of keys under prefix "/p/" at revision 10.
func indexOf(t *testing.T, keys ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	kw, err := backup.NewKeysJSONWriter(&buf, backup.KeysJSONHeader{Format: backup.KeysJSONFormat, Version: backup.KeysJSONVersion,
		Revision: 10, Prefixes: []string{"/p/"}, Created: time.Unix(0, 0).UTC()})
	require.NoError(t, err)
	for i, k := range keys {
		require.NoError(t, kw.Write(backup.KeyValue{Key: []byte(k), CreateRevision: int64(i + 2), ModRevision: int64(i + 2), Version: 1}))
	}
	require.NoError(t, kw.Close())
	return buf.Bytes()
}

// TestKeysZipHostile imports archives made to harm a reader: each fails
// with backup.ErrKeysZip before anything is written.
func TestKeysZipHostile(t *testing.T) {
	name := func(i int64, k string) string { return backup.KeysZipEntryName(i, []byte(k)) }
	valid := handZip(t, []zipFile{{name: name(0, "/p/a"), data: []byte("a")}, {name: name(1, "/p/b"), data: []byte("b")}}, indexOf(t, "/p/a", "/p/b"))
	bomb := bytes.Repeat([]byte{0}, backup.MaxKeysJSONLine+1)
	cases := map[string][]byte{
		"path traversal":       handZip(t, []zipFile{{name: "../../evil", data: []byte("a")}}, indexOf(t, "/p/a")),
		"traversal under keys": handZip(t, []zipFile{{name: "keys/../../evil", data: []byte("a")}}, indexOf(t, "/p/a")),
		"duplicate entry": handZip(t, []zipFile{{name: name(0, "/p/a"), data: []byte("a")}, {name: name(0, "/p/a"), data: []byte("again")}},
			indexOf(t, "/p/a")),
		"duplicate name for two keys": handZip(t, []zipFile{{name: name(0, "/p/a"), data: []byte("a")}, {name: name(0, "/p/a"), data: []byte("b")}},
			indexOf(t, "/p/a", "/p/b")),
		"file missing":                handZip(t, []zipFile{{name: name(0, "/p/a"), data: []byte("a")}}, indexOf(t, "/p/a", "/p/b")),
		"no index":                    handZip(t, []zipFile{{name: name(0, "/p/a"), data: []byte("a")}}, nil),
		"zip bomb":                    handZip(t, []zipFile{{name: name(0, "/p/a"), data: bomb}}, indexOf(t, "/p/a")),
		"zip bomb, lying header":      handZip(t, []zipFile{{name: name(0, "/p/a"), data: bomb, declared: 10}}, indexOf(t, "/p/a")),
		"truncated central directory": valid[:len(valid)-30],
		"cut in the middle":           valid[:len(valid)/2],
	}
	dst := etcdtest.Start(t)
	dc := dst.Client(t)
	dir := t.TempDir()
	for what, archive := range cases {
		t.Run(what, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(what, " ", "-")+".zip")
			require.NoError(t, os.WriteFile(path, archive, 0o600))
			im := &restore.Importer{Client: dc, Mode: restore.Overwrite, TempDir: dir}
			_, err := im.ImportFile(t.Context(), path)
			require.ErrorIs(t, err, backup.ErrKeysZip)
			require.ErrorIs(t, err, backup.ErrKeysJSON)
			requireKeyCount(t, dc, 0)
		})
	}

	// The archive's bound: a valid zip decoding to more than MaxBytes.
	path := filepath.Join(dir, "valid.zip")
	require.NoError(t, os.WriteFile(path, valid, 0o600))
	_, err := (&restore.Importer{Client: dc, MaxBytes: 100, TempDir: dir}).ImportFile(t.Context(), path)
	require.ErrorIs(t, err, backup.ErrKeysZip)
	requireKeyCount(t, dc, 0)
	res, err := (&restore.Importer{Client: dc, TempDir: dir}).ImportFile(t.Context(), path)
	require.NoError(t, err, "the archive the cases break is valid")
	require.EqualValues(t, 2, res.Created)
}
