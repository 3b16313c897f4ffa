package restore_test

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/restore"
)

// exportKeys returns a keys-json export of prefixes of c.
func exportKeys(t *testing.T, c *clientv3.Client, prefixes ...string) []byte {
	t.Helper()
	snap, err := (&backup.KeysExporter{Client: c, Prefixes: prefixes}).Snapshot(t.Context())
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = buf.ReadFrom(snap)
	require.NoError(t, err)
	require.NoError(t, snap.Close())
	return buf.Bytes()
}

func putAll(t *testing.T, c *clientv3.Client, kvs ...string) {
	t.Helper()
	for i := 0; i < len(kvs); i += 2 {
		_, err := c.Put(t.Context(), kvs[i], kvs[i+1])
		require.NoError(t, err)
	}
}

func keyNames(t *testing.T, c *clientv3.Client) []string {
	t.Helper()
	resp, err := c.Get(t.Context(), "\x00", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	require.NoError(t, err)
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

func TestKeyMappingScope(t *testing.T) {
	for _, c := range []struct {
		name   string
		m      restore.KeyMapping
		header []string
		want   []string
		err    bool
	}{
		{name: "narrowed to the backup", m: restore.KeyMapping{Prefixes: []string{"/registry/"}}, header: []string{"/registry/pods/"}, want: []string{"/registry/pods/"}},
		{name: "no slash", m: restore.KeyMapping{Prefixes: []string{"/a"}}, header: []string{"/a/"}, want: []string{"/a/"}},
		{name: "narrower request", m: restore.KeyMapping{Prefixes: []string{"/a/b/"}}, header: []string{"/a/"}, want: []string{"/a/b/"}},
		{name: "the backup's", header: []string{"/a/", "/b/"}, want: []string{"/a/", "/b/"}},
		{name: "whole backup", m: restore.KeyMapping{Prefixes: []string{"/a/"}}, want: []string{"/a/"}},
		{name: "everything", want: nil},
		{name: "outside", m: restore.KeyMapping{Prefixes: []string{"/x/"}}, header: []string{"/a/"}, err: true},
		{name: "one of two outside", m: restore.KeyMapping{Prefixes: []string{"/a/", "/x/"}}, header: []string{"/a/"}, err: true},
		{name: "renamed", m: restore.KeyMapping{Prefixes: []string{"/registry/"}, StripPrefix: "/registry/cm/a/", AddPrefix: "/registry/cm/b/"},
			header: []string{"/registry/cm/"}, want: []string{"/registry/cm/b/"}},
		{name: "renamed inside", m: restore.KeyMapping{StripPrefix: "/registry/", AddPrefix: "/r/"},
			header: []string{"/registry/cm/"}, want: []string{"/r/cm/"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.m.Scope(c.header)
			if c.err {
				require.ErrorIs(t, err, restore.ErrScope)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
}

// TestImportDeleteMissingStaysInTheBackup: an import asked for a wider
// prefix than the backup holds deletes nothing outside the backup's
// prefixes, and one outside them is refused.
func TestImportDeleteMissingStaysInTheBackup(t *testing.T) {
	ctx := t.Context()
	src := etcdtest.Start(t, etcdtest.WithName("scope-source")).Client(t)
	putAll(t, src, "/registry/pods/p1", "1", "/registry/pods/p2", "2", "/a/1", "a1")
	pods := exportKeys(t, src, "/registry/pods/")
	a := exportKeys(t, src, "/a/")

	dst := etcdtest.Start(t, etcdtest.WithName("scope-target")).Client(t)
	putAll(t, dst, "/registry/pods/old", "x", "/registry/services/s1", "s", "/registry/secrets/x", "x", "/a/2", "a2", "/ab/1", "ab")
	im := &restore.Importer{Client: dst, Mode: restore.Overwrite, DeleteMissing: true, Mapping: restore.KeyMapping{Prefixes: []string{"/registry/"}}}
	res, err := im.Import(ctx, bytes.NewReader(pods))
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Deleted)
	require.True(t, res.Complete)
	im.Mapping.Prefixes = []string{"/a"}
	res, err = im.Import(ctx, bytes.NewReader(a))
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Deleted)
	require.Equal(t, []string{"/a/1", "/ab/1", "/registry/pods/p1", "/registry/pods/p2", "/registry/secrets/x", "/registry/services/s1"}, keyNames(t, dst))

	before := revision(t, dst)
	im.Mapping.Prefixes = []string{"/registry/services/"}
	_, err = im.Import(ctx, bytes.NewReader(pods))
	require.ErrorIs(t, err, restore.ErrScope)
	require.Equal(t, before, revision(t, dst))

	// diff's scope is the same.
	var changes []string
	from, h, err := restore.KeysJSONSource(bytes.NewReader(pods), restore.KeyMapping{})
	require.NoError(t, err)
	scope, err := restore.KeyMapping{Prefixes: []string{"/registry/"}}.Scope(h.Prefixes)
	require.NoError(t, err)
	putAll(t, dst, "/registry/pods/new", "n")
	require.NoError(t, restore.Diff(ctx, from, restore.NewEtcdKeys(dst, scope), func(c restore.KeyChange) error {
		changes = append(changes, c.Op+" "+string(c.Key))
		return nil
	}))
	require.Equal(t, []string{"added /registry/pods/new"}, changes)
}

// cutAfter returns obj up to and including its first n lines.
func cutAfter(obj []byte, n int) []byte {
	lines := strings.SplitAfter(string(obj), "\n")
	return []byte(strings.Join(lines[:n], ""))
}

// TestImportRefusesACutStream: an export cut at a line boundary deletes
// nothing: version 2 objects fail on their missing end line, version 1
// objects are refused for delete-missing and say they are not complete.
func TestImportRefusesACutStream(t *testing.T) {
	ctx := t.Context()
	src := etcdtest.Start(t, etcdtest.WithName("cut-source")).Client(t)
	for i := range 10 {
		putAll(t, src, fmt.Sprintf("/k/%02d", i), "v")
	}
	obj := exportKeys(t, src, "/k/")
	dst := etcdtest.Start(t, etcdtest.WithName("cut-target")).Client(t)
	for i := range 10 {
		putAll(t, dst, fmt.Sprintf("/k/%02d", i), "v")
	}
	before := revision(t, dst)
	im := &restore.Importer{Client: dst, Mode: restore.Overwrite, DeleteMissing: true}
	_, err := im.Import(ctx, bytes.NewReader(cutAfter(obj, 4)))
	require.ErrorIs(t, err, backup.ErrKeysJSON)
	require.Equal(t, before, revision(t, dst))

	// The same keys as a version 1 object, as older versions wrote them.
	var v1 bytes.Buffer
	r, err := backup.NewKeysJSONReader(bytes.NewReader(obj))
	require.NoError(t, err)
	h := r.Header()
	h.Version = 1
	w, err := backup.NewKeysJSONWriter(&v1, h)
	require.NoError(t, err)
	for {
		kv, err := r.Next()
		if err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
		require.NoError(t, w.Write(kv))
	}
	require.NoError(t, w.Close())
	cut := cutAfter(v1.Bytes(), 4)
	_, err = im.Import(ctx, bytes.NewReader(cut))
	require.ErrorIs(t, err, restore.ErrImport)
	require.Equal(t, before, revision(t, dst))
	require.Len(t, keyNames(t, dst), 10)

	im.ManifestChecked = true
	res, err := im.Import(ctx, bytes.NewReader(v1.Bytes()))
	require.NoError(t, err, "a version 1 object whose manifest was checked")
	require.True(t, res.Complete)

	res, err = (&restore.Importer{Client: dst}).Import(ctx, bytes.NewReader(cut))
	require.NoError(t, err)
	require.False(t, res.Complete)
	require.EqualValues(t, 3, res.Keys)
}
