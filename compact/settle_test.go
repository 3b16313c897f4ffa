package compact_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/compact"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/restore"
)

// restoreSynthetic restores the synthetic full backup id alone at rev and
// starts etcd on it.
func restoreSynthetic(t *testing.T, c *chain, id string, rev int64) *clientv3.Client {
	t.Helper()
	ctx := t.Context()
	plan, err := restore.FindPoint(ctx, c.sources(), restore.Point{Cluster: "prod-a", Revision: rev})
	require.NoError(t, err)
	require.Equal(t, id, plan.Full.ID)
	require.Empty(t, plan.Segments)
	dataDir := filepath.Join(t.TempDir(), "restored.etcd")
	_, err = (&restore.Restorer{Identities: []age.Identity{c.id}}).RestorePoint(ctx, plan,
		restore.Member{Name: "restored", DataDir: dataDir, PeerURLs: []string{"http://127.0.0.1:2380"}})
	require.NoError(t, err)
	return etcdtest.Start(t, etcdtest.WithDataDir(dataDir), etcdtest.WithName("restored")).Client(t)
}

// TestSyntheticFullIsCompactedAtItsRevision: a synthetic full backup holds
// the store compacted at its revision, as the source compacts its own: a
// restored member refuses an older revision as compacted, and the
// database holds the live keys, not every revision the chain replayed.
func TestSyntheticFullIsCompactedAtItsRevision(t *testing.T) {
	c := startChain(t)
	ctx := t.Context()
	val := strings.Repeat("x", 1024)
	const puts = 600
	var last int64
	for i := range puts {
		r, err := c.cli.Put(ctx, "/hot", fmt.Sprintf("%d%s", i, val))
		require.NoError(t, err)
		last = r.Header.Revision
	}
	c.waitCommitted(t, last)
	res, err := c.compactor(t).Compact(ctx, compact.Request{Cluster: "prod-a", Sources: c.sources(), Targets: c.targets(c.bucket)})
	require.NoError(t, err)
	require.Equal(t, last, res.Revision)

	b, err := restore.Find(ctx, c.sources(), restore.Query{Cluster: "prod-a", ID: res.ID})
	require.NoError(t, err)
	d, err := (&restore.Restorer{Identities: []age.Identity{c.id}, TempDir: t.TempDir()}).Drill(ctx, b)
	require.NoError(t, err)
	live, err := c.cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	require.LessOrEqual(t, int64(d.Status.TotalKeys), 2*live.Count, "revisions held against live keys")
	require.Less(t, d.Status.TotalSize, int64(puts*len(val)/3), "database size against the %d bytes of history", puts*len(val))

	rc := restoreSynthetic(t, c, res.ID, last)
	got, err := rc.Get(ctx, "/hot")
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("%d%s", puts-1, val), string(got.Kvs[0].Value))
	_, err = rc.Get(ctx, "/hot", clientv3.WithRev(last-100))
	require.True(t, errors.Is(err, rpctypes.ErrCompacted), "an older revision is compacted: %v", err)
}

// TestSyntheticFullDropsRevokedLeases: a lease revoked at the source (the
// watch shows only its keys' deletes) is not carried into the synthetic
// full backup; a lease with keys is.
func TestSyntheticFullDropsRevokedLeases(t *testing.T) {
	c := startChain(t)
	ctx := t.Context()
	kept, err := c.cli.Grant(ctx, 600)
	require.NoError(t, err)
	_, err = c.cli.Put(ctx, "/kept", "v", clientv3.WithLease(kept.ID))
	require.NoError(t, err)
	for i := range 3 {
		l, err := c.cli.Grant(ctx, 600)
		require.NoError(t, err)
		_, err = c.cli.Put(ctx, fmt.Sprintf("/revoked%d", i), "v", clientv3.WithLease(l.ID))
		require.NoError(t, err)
		_, err = c.cli.Revoke(ctx, l.ID)
		require.NoError(t, err)
	}
	r, err := c.cli.Put(ctx, "/last", "v")
	require.NoError(t, err)
	c.waitCommitted(t, r.Header.Revision)
	res, err := c.compactor(t).Compact(ctx, compact.Request{Cluster: "prod-a", Sources: c.sources(), Targets: c.targets(c.bucket)})
	require.NoError(t, err)

	rc := restoreSynthetic(t, c, res.ID, res.Revision)
	ll, err := rc.Leases(ctx)
	require.NoError(t, err)
	var ids []clientv3.LeaseID
	for _, l := range ll.Leases {
		ids = append(ids, l.ID)
	}
	require.Equal(t, []clientv3.LeaseID{kept.ID}, ids, "leases of the restored synthetic full backup")
}

// TestCompactRefusesToDropEncryption: a compactor without recipients over
// an encrypted chain is refused with ErrEncryptionChanged and stores
// nothing; allowed explicitly, it stores the synthetic full unencrypted.
func TestCompactRefusesToDropEncryption(t *testing.T) {
	c := startChain(t)
	ctx := t.Context()
	r, err := c.cli.Put(ctx, "/k", "v")
	require.NoError(t, err)
	c.waitCommitted(t, r.Header.Revision)
	require.NoError(t, c.stop())
	before := listKeys(t, c.bucket)
	cp := c.compactor(t)
	cp.Pipeline = &backup.Pipeline{Compression: backup.Zstd}
	q := compact.Request{Cluster: "prod-a", Sources: c.sources(), Targets: c.targets(c.bucket)}
	_, err = cp.Compact(ctx, q)
	require.ErrorIs(t, err, compact.ErrEncryptionChanged)
	require.Equal(t, before, listKeys(t, c.bucket), "nothing stored")

	q.AllowEncryptionChange = true
	res, err := cp.Compact(ctx, q)
	require.NoError(t, err)
	require.Nil(t, res.Backup.Outcomes[0].Manifest.Encryption)
}
