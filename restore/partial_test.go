package restore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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

// failingKV fails the target's reads from failFrom on, and the Txn
// commits after the first okTxns with an error that does not say whether
// etcd committed them (a lost connection).
type failingKV struct {
	clientv3.KV
	failFrom string
	okTxns   int
	txns     int
}

func (k *failingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if k.failFrom != "" && key >= k.failFrom {
		return nil, errors.New("connection reset")
	}
	return k.KV.Get(ctx, key, opts...)
}

func (k *failingKV) Txn(ctx context.Context) clientv3.Txn {
	k.txns++
	if k.okTxns > 0 && k.txns > k.okTxns {
		return lostTxn{k.KV.Txn(ctx)}
	}
	return k.KV.Txn(ctx)
}

type lostTxn struct{ clientv3.Txn }

func (t lostTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { return lostTxn{t.Txn.If(cs...)} }
func (t lostTxn) Then(ops ...clientv3.Op) clientv3.Txn { return lostTxn{t.Txn.Then(ops...)} }
func (t lostTxn) Commit() (*clientv3.TxnResponse, error) {
	return nil, status.Error(codes.Unavailable, "connection lost")
}

// smallObject is a keys-json object of n keys /k/a000... .
func smallObject(t *testing.T, n int) []byte {
	var buf bytes.Buffer
	w, err := backup.NewKeysJSONWriter(&buf, backup.KeysJSONHeader{Format: backup.KeysJSONFormat, Version: backup.KeysJSONVersion,
		Revision: 200, Prefixes: []string{"/k/"}, Created: time.Now().UTC()})
	require.NoError(t, err)
	for i := range n {
		require.NoError(t, w.Write(backup.KeyValue{Key: fmt.Appendf(nil, "/k/a%03d", i), Value: []byte("v"), CreateRevision: 2, ModRevision: 2, Version: 1}))
	}
	require.NoError(t, w.Close())
	return buf.Bytes()
}

// TestImportReportsProgressWhenReadingTheTargetFailsPartWay: an import
// that committed batches and then fails to read the target says where it
// stopped.
func TestImportReportsProgressWhenReadingTheTargetFailsPartWay(t *testing.T) {
	ctx := t.Context()
	dst := etcdtest.Start(t).Client(t)
	for b := range 11 { // more than a page of the target's keys
		var ops []clientv3.Op
		for i := range 100 {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/k/t%04d", b*100+i), "t"))
		}
		_, err := dst.Txn(ctx).Then(ops...).Commit()
		require.NoError(t, err)
	}
	dst.KV = &failingKV{KV: dst.KV, failFrom: "/k/t"}
	res, err := (&restore.Importer{Client: dst, BatchSize: 10}).Import(ctx, bytes.NewReader(smallObject(t, 50)))
	require.ErrorContains(t, err, "connection reset")
	require.NotNil(t, res)
	require.EqualValues(t, 50, res.Written())
	require.Equal(t, "/k/a049\x00", string(res.NotWritten))
	require.False(t, res.MayBeWritten)
}

// TestImportSaysAnAmbiguousWriteMayBeWritten: a batch whose write failed
// without an answer is reported as one that may or may not be written.
func TestImportSaysAnAmbiguousWriteMayBeWritten(t *testing.T) {
	dst := etcdtest.Start(t).Client(t)
	dst.KV = &failingKV{KV: dst.KV, okTxns: 2}
	res, err := (&restore.Importer{Client: dst, BatchSize: 10}).Import(t.Context(), bytes.NewReader(smallObject(t, 50)))
	require.ErrorContains(t, err, "may or may not be written")
	require.EqualValues(t, 20, res.Written())
	require.Equal(t, "/k/a020", string(res.NotWritten))
	require.True(t, res.MayBeWritten)
}
