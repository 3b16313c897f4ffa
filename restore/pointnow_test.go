package restore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/restore"
)

// TestFindPointNowAfterRewind: the CLI's default restore asks FindPoint
// for now and restores the end of the chain it returns. After a rewind
// (restore --to-revision without --bump-revision) the old history has a
// full backup at 5000 and a segment to 6000, and the full taken after the
// rewind is at 2000: now is the newer history, whatever the revisions.
func TestFindPointNowAfterRewind(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	now := time.Now().UTC()
	old := now.Add(-10 * time.Hour)
	fullAt(t, b, old, 5000)
	storeSegment(ctx, b, old.Add(time.Minute), 5001, 6000)
	newFull := fullAt(t, b, now.Add(-time.Hour), 2000) // after the rewind
	src := []restore.Source{{Name: "d", Catalog: b}}

	plan, err := restore.FindPoint(ctx, src, restore.Point{Cluster: "prod-a", Time: time.Now()})
	require.NoError(t, err)
	require.Equal(t, newFull, plan.Full.ID, "now is the history after the rewind")
	require.Empty(t, plan.Segments, "no segment of the abandoned history")
}
