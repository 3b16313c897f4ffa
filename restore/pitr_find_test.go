package restore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// fullAt stores a full backup of the test snapshot that claims revision
// rev, created at at.
func fullAt(t *testing.T, b *blob.Bucket, at time.Time, rev int64) string {
	t.Helper()
	snap := writeFile(t, "snapshot.db", gunzip(filepath.Join("testdata", "three-keys.db.gz")))
	p := &backup.Pipeline{Snapshotter: revisionSnapshotter{fileSnapshotter{snap}, rev}, Now: func() time.Time { return at }}
	res, err := p.Run(t.Context(), backup.Request{Cluster: "prod-a", Name: "full", Scheduled: true,
		Targets: []backup.Target{{Destination: "d", Uploader: &backup.BucketUploader{Bucket: b}}}})
	require.NoError(t, err)
	return res.ID
}

// TestFindPoint covers the choice of a chain: the newest full backup at or
// before the point that segments reach it from, overlapping and repeated
// segments (across sources too), gaps, and points by time.
func TestFindPoint(t *testing.T) {
	ctx := context.Background()
	one, two := memBucket(t), memBucket(t)
	at := time.Date(2026, 11, 22, 2, 0, 0, 0, time.UTC)
	full10 := fullAt(t, one, at, 10)
	full50 := fullAt(t, one, at.Add(time.Hour), 50)
	seg := func(b *blob.Bucket, minute int, first, last int64) {
		storeSegment(ctx, b, at.Add(time.Duration(minute)*time.Minute), first, last)
	}
	seg(one, 1, 11, 20)
	seg(one, 2, 15, 30) // overlaps the previous one
	seg(two, 3, 31, 40) // on the other source only
	seg(one, 3, 31, 40) // the same segment on both
	// A gap from 41 to 60: the follower missed them; full50 is at 50.
	seg(one, 90, 61, 70)
	sources := []restore.Source{{Name: "one", Catalog: one}, {Name: "two", Catalog: two}}

	plan, err := restore.FindPoint(ctx, sources, restore.Point{Cluster: "prod-a", Revision: 35})
	require.NoError(t, err)
	require.Equal(t, full10, plan.Full.ID)
	require.Equal(t, [][2]int64{{11, 20}, {15, 30}, {31, 40}}, ranges(plan.Segments))
	require.Equal(t, "one", plan.Segments[2].Source, "the first source wins")

	plan, err = restore.FindPoint(ctx, sources, restore.Point{Cluster: "prod-a", Revision: 10})
	require.NoError(t, err)
	require.Equal(t, full10, plan.Full.ID)
	require.Empty(t, plan.Segments, "a full backup's own revision needs no segment")

	_, err = restore.FindPoint(ctx, sources, restore.Point{Cluster: "prod-a", Revision: 45})
	require.True(t, errors.Is(err, restore.ErrNoChain), "revision 45 lies in a gap: %v", err)
	_, err = restore.FindPoint(ctx, sources, restore.Point{Cluster: "prod-a", Revision: 65})
	require.True(t, errors.Is(err, restore.ErrNoChain), "full50 has no segment from 51: %v", err)
	_, err = restore.FindPoint(ctx, sources, restore.Point{Cluster: "prod-a", Revision: 5})
	require.True(t, errors.Is(err, restore.ErrNoBackup), "no full backup before revision 5: %v", err)
	plan, err = restore.FindPoint(ctx, sources, restore.Point{Cluster: "prod-a", Revision: 50})
	require.NoError(t, err)
	require.Equal(t, full50, plan.Full.ID, "the newest full backup at or before the point")

	// By time: segments up to the first committed after the time.
	plan, err = restore.FindPoint(ctx, sources, restore.Point{Cluster: "prod-a", Time: at.Add(90 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, full10, plan.Full.ID)
	require.Equal(t, [][2]int64{{11, 20}, {15, 30}}, ranges(plan.Segments))

	for _, bad := range []restore.Point{{Cluster: "prod-a"}, {Cluster: "prod-a", Revision: 3, Time: at}, {Cluster: "Prod", Revision: 3}} {
		_, err := restore.FindPoint(ctx, sources, bad)
		require.Error(t, err, fmt.Sprintf("%+v", bad))
	}
}

func ranges(bs []restore.Backup) [][2]int64 {
	var out [][2]int64
	for _, b := range bs {
		out = append(out, [2]int64{b.Manifest.FirstRevision, b.Manifest.LastRevision})
	}
	return out
}
