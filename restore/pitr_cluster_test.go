package restore_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// clusterSnapshotter records a known revision and cluster ID for its
// snapshots.
type clusterSnapshotter struct {
	revisionSnapshotter
	clusterID uint64
}

func (c clusterSnapshotter) Snapshot(ctx context.Context) (*backup.Snapshot, error) {
	snap, err := c.revisionSnapshotter.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	info := snap.Info()
	info.ClusterID = c.clusterID
	return backup.NewSnapshot(snap, info, nil), nil
}

// storeClusterSegment stores a stand-in segment of chain recorded from
// the cluster of ID clusterID.
func storeClusterSegment(t *testing.T, b *blob.Bucket, created time.Time, chain, clusterID string, first, last int64) {
	t.Helper()
	m := &backup.Manifest{Format: backup.DeltaManifestFormat, Kind: backup.ManifestKindDelta, Cluster: "prod-a",
		Name: "delta", Created: created, Completed: created, Compression: backup.None,
		FirstRevision: first, LastRevision: last, Chain: chain, Etcd: backup.EtcdInfo{ClusterID: clusterID},
		Raw: backup.Digest{Size: 4, SHA256: strings.Repeat("0", 64)}, Stored: backup.Digest{Size: 4, SHA256: strings.Repeat("0", 64)}}
	m.ID = backup.BackupID(m.Cluster, m.Name, created, true)
	m.DataKey = backup.DataKey(m.ID, created, backup.None, false)
	u := &backup.BucketUploader{Bucket: b}
	require.NoError(t, u.Upload(t.Context(), m, bytes.NewReader([]byte("none"))))
	require.NoError(t, u.Commit(t.Context(), m))
}

// TestFindPointRefusesSegmentOfAnotherCluster: a chain whose segments
// past revision 20 were recorded from another cluster than its full
// backup's (a follower that continued it with another history) is
// restorable up to 20 only: a later point is a gap.
func TestFindPointRefusesSegmentOfAnotherCluster(t *testing.T) {
	b := memBucket(t)
	at := time.Date(2026, 11, 22, 2, 0, 0, 0, time.UTC)
	snap := writeFile(t, "snapshot.db", gunzip(filepath.Join("testdata", "three-keys.db.gz")))
	p := &backup.Pipeline{Snapshotter: clusterSnapshotter{revisionSnapshotter{fileSnapshotter{snap}, 10}, 0xdef}, Now: func() time.Time { return at }}
	res, err := p.Run(t.Context(), backup.Request{Cluster: "prod-a", Name: "full", Scheduled: true,
		Targets: []backup.Target{{Destination: "d", Uploader: &backup.BucketUploader{Bucket: b}}}})
	require.NoError(t, err)
	storeClusterSegment(t, b, at.Add(time.Minute), res.ID, "def", 11, 20)
	storeClusterSegment(t, b, at.Add(2*time.Minute), res.ID, "abc", 21, 30)
	sources := []restore.Source{{Name: "b", Catalog: b}}

	plan, err := restore.FindPoint(t.Context(), sources, restore.Point{Cluster: "prod-a", Revision: 20})
	require.NoError(t, err)
	require.Equal(t, [][2]int64{{11, 20}}, ranges(plan.Segments))

	_, err = restore.FindPoint(t.Context(), sources, restore.Point{Cluster: "prod-a", Revision: 25})
	require.ErrorIs(t, err, restore.ErrNoChain)
	var gap *restore.GapError
	require.True(t, errors.As(err, &gap))
	require.Equal(t, int64(21), gap.From)
	require.Equal(t, int64(20), gap.Nearest)
}
