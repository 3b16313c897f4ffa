package restore_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/restore"
)

// bigValueObject is a keys-json object of 100 small keys under /k/ and,
// last, /k/zz with a value of size bytes.
func bigValueObject(t *testing.T, size int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := backup.NewKeysJSONWriter(&buf, backup.KeysJSONHeader{Format: backup.KeysJSONFormat, Version: backup.KeysJSONVersion,
		Revision: 200, Prefixes: []string{"/k/"}, Created: time.Now().UTC()})
	require.NoError(t, err)
	for i := range 100 {
		require.NoError(t, w.Write(backup.KeyValue{Key: fmt.Appendf(nil, "/k/%03d", i), Value: []byte("v"), CreateRevision: 2, ModRevision: 2, Version: 1}))
	}
	require.NoError(t, w.Write(backup.KeyValue{Key: []byte("/k/zz"), Value: []byte(strings.Repeat("x", size)), CreateRevision: 2, ModRevision: 2, Version: 1}))
	require.NoError(t, w.Close())
	return buf.Bytes()
}

// TestImportChecksRequestSizeFirst: a value over the target's request
// limit fails the import before its first write; one the importer was
// told fits fails part-way, and the result says what was committed and
// the first key that was not.
func TestImportChecksRequestSizeFirst(t *testing.T) {
	ctx := t.Context()
	dst := etcdtest.Start(t).Client(t)
	obj := bigValueObject(t, 1600<<10) // over etcd's default 1.5 MiB
	before := revision(t, dst)
	_, err := (&restore.Importer{Client: dst, BatchSize: 10}).Import(ctx, bytes.NewReader(obj))
	require.ErrorIs(t, err, restore.ErrImport)
	require.Equal(t, before, revision(t, dst), "nothing written")

	res, err := (&restore.Importer{Client: dst, BatchSize: 10, MaxRequestBytes: 4 << 20}).Import(ctx, bytes.NewReader(obj))
	require.Error(t, err)
	require.NotNil(t, res)
	require.EqualValues(t, 100, res.Created)
	require.EqualValues(t, 100, res.Written())
	require.Equal(t, "/k/zz", string(res.NotWritten))
	require.Contains(t, err.Error(), "100 keys written before them stay")
}
