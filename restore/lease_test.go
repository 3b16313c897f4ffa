package restore_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/restore"
)

// TestImportLeases: a key that had a lease in the source is skipped and
// counted by default, imported without a lease when asked; an overwrite
// keeps the target key's own lease.
func TestImportLeases(t *testing.T) {
	ctx := t.Context()
	src := etcdtest.Start(t, etcdtest.WithName("lease-source")).Client(t)
	l, err := src.Grant(ctx, 600)
	require.NoError(t, err)
	_, err = src.Put(ctx, "/registry/masterleases/10.0.0.1", "ip", clientv3.WithLease(l.ID))
	require.NoError(t, err)
	putAll(t, src, "/registry/masterleases/plain", "p", "/registry/masterleases/shared", "new")
	obj := exportKeys(t, src, "/registry/masterleases/")

	dst := etcdtest.Start(t, etcdtest.WithName("lease-target")).Client(t)
	own, err := dst.Grant(ctx, 600)
	require.NoError(t, err)
	_, err = dst.Put(ctx, "/registry/masterleases/shared", "old", clientv3.WithLease(own.ID))
	require.NoError(t, err)

	res, err := (&restore.Importer{Client: dst, Mode: restore.Overwrite, DeleteMissing: true}).Import(ctx, bytes.NewReader(obj))
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Leased)
	require.Equal(t, restore.SkipLeased, res.Leases)
	require.Equal(t, []string{"/registry/masterleases/plain", "/registry/masterleases/shared"}, keyNames(t, dst))
	resp, err := dst.Get(ctx, "/registry/masterleases/shared")
	require.NoError(t, err)
	require.Equal(t, "new", string(resp.Kvs[0].Value))
	require.Equal(t, int64(own.ID), resp.Kvs[0].Lease, "the target's own lease stays on an overwritten key")

	res, err = (&restore.Importer{Client: dst, Leases: restore.WithoutLease}).Import(ctx, bytes.NewReader(obj))
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Leased)
	require.EqualValues(t, 1, res.Created)
	resp, err = dst.Get(ctx, "/registry/masterleases/10.0.0.1")
	require.NoError(t, err)
	require.Zero(t, resp.Kvs[0].Lease)
}

// TestImportDeleteMissingKeepsTheTargetsLeasedKeys: with delete-missing
// and the default lease policy, a key of the target that has a lease (a
// live apiserver's master lease, a held election key) and is not in the
// object stays, and is counted.
func TestImportDeleteMissingKeepsTheTargetsLeasedKeys(t *testing.T) {
	ctx := t.Context()
	src := etcdtest.Start(t, etcdtest.WithName("kept-source")).Client(t)
	putAll(t, src, "/registry/masterleases/plain", "p")
	obj := exportKeys(t, src, "/registry/masterleases/")

	dst := etcdtest.Start(t, etcdtest.WithName("kept-target")).Client(t)
	l, err := dst.Grant(ctx, 600)
	require.NoError(t, err)
	_, err = dst.Put(ctx, "/registry/masterleases/10.0.0.2", "ip", clientv3.WithLease(l.ID))
	require.NoError(t, err)
	putAll(t, dst, "/registry/masterleases/stale", "s")

	res, err := (&restore.Importer{Client: dst, Mode: restore.Overwrite, DeleteMissing: true}).Import(ctx, bytes.NewReader(obj))
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Deleted)
	require.EqualValues(t, 1, res.KeptLeased)
	require.Equal(t, []string{"/registry/masterleases/10.0.0.2", "/registry/masterleases/plain"}, keyNames(t, dst))
}
