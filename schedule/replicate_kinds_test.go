package schedule

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/replicate"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
)

// storeKeysJSON commits a keys-json backup of opaque bytes on b.
func storeKeysJSON(t *testing.T, b storage.Bucket, created time.Time, rev int64) *backup.Manifest {
	return storeBackup(t, b, backup.Manifest{Format: backup.DeltaManifestFormat, Kind: backup.ManifestKindKeysJSON, Name: "export", Keys: 1,
		Created: created, Etcd: backup.EtcdInfo{Revision: backup.RevisionInfo{Low: rev, High: rev}}})
}

// storeBackup commits the backup m describes, of opaque bytes, on b, as
// a run of cluster prod-a writing to primary would.
func storeBackup(t *testing.T, b storage.Bucket, m backup.Manifest) *backup.Manifest {
	t.Helper()
	data := fmt.Appendf(nil, "%s %d %d", m.Name, m.Etcd.Revision.Low, m.FirstRevision)
	sum := sha256.Sum256(data)
	m.Cluster, m.Destination, m.Compression, m.Completed, m.Run = "prod-a", "primary", backup.None, m.Created.Add(time.Second), "0123abcd"
	m.Stored = backup.Digest{Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
	m.Raw = m.Stored
	m.ID = backup.BackupID(m.Cluster, m.Name, m.Created, true)
	m.DataKey = backup.DataKey(m.ID, m.Created, m.Compression, false)
	if m.Format == 0 {
		m.Format = backup.ManifestFormat
	}
	up := &backup.BucketUploader{Bucket: b}
	require.NoError(t, up.Upload(t.Context(), &m, bytes.NewReader(data)))
	require.NoError(t, up.Commit(t.Context(), &m))
	return &m
}

// TestReplicationPruneCountsKeysJSONCopies: a replication job's prune
// applies its retention to the keys-json copies on its target too, apart
// from the snapshots: KeepLast(2) leaves two of five.
func TestReplicationPruneCountsKeysJSONCopies(t *testing.T) {
	dests := newMemDestinations(t, "primary", "vault")
	now := utc("2026-01-01T12:00:00Z")
	for i := range 5 {
		storeKeysJSON(t, dests["primary"], now.Add(-time.Duration(5-i)*time.Hour), int64(10+i))
	}
	c := &replicate.Copier{Source: dests["primary"], SourceName: "primary", Target: replicate.Target{Name: "vault", Bucket: dests["vault"]}}
	_, err := c.Copy(t.Context(), "prod-a", replicate.Selection{All: true})
	require.NoError(t, err)
	runner := dests.runner(&streamSnapshotter{}, func() time.Time { return now })
	job := Job{ID: "ns/replicate", Schedule: "@hourly", Cluster: "prod-a", Name: "vault", Destinations: []string{"vault"},
		Retention: retention.KeepLast(2), Replicate: &Replicate{From: "primary"}}
	require.NoError(t, runner.Prune(t.Context(), job))
	entries, err := backup.ListBackups(t.Context(), dests["vault"], "prod-a")
	require.NoError(t, err)
	require.Len(t, entries, 2, "keys-json copies left by a prune with KeepLast(2)")
}
