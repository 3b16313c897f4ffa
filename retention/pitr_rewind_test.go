package retention_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
)

// TestPointInTimeAfterRewind: prune --keep-last=1 --point-in-time=2h after a rewind (restore
// --to-revision=2000 without --bump-revision, then follow restarted): the
// old timeline's full is at 5000, the new timeline's full at 2000 (kept:
// newest) and its segments 2001..3000 are the last 90 minutes of the
// cluster. The window's base is the old full (completed before now-2h), so
// every new-timeline segment "ends at or before the base's revision" and is
// deleted: the newest 90 minutes would become unrestorable. They are kept.
func TestPointInTimeAfterRewind(t *testing.T) {
	oldFull := fullEntry(0, 5000)
	newFull := fullEntry(9*time.Hour+30*time.Minute, 2000)
	entries := []backup.Entry{
		oldFull,
		segmentEntry(time.Hour, 5001, 6000, oldFull.ID),
		newFull,
		segmentEntry(10*time.Hour, 2001, 2500, newFull.ID),
		segmentEntry(10*time.Hour+50*time.Minute, 2501, 3000, newFull.ID),
	}
	now := chainEpoch.Add(11 * time.Hour)
	plan, err := retention.MakePlan("c", entries, retention.Policy{KeepLast: 1}, now, retention.PlanOptions{})
	require.NoError(t, err)
	plan, err = retention.PointInTime(2 * time.Hour).Apply(plan)
	require.NoError(t, err)
	var kept []backup.Entry
	for _, d := range plan.Decisions {
		t.Logf("%-7v %s: %s", d.Action, d.Entry.ID, d.Reason)
		if d.Action == retention.Keep {
			kept = append(kept, d.Entry)
		}
	}
	require.True(t, restorable(kept, 3000), "revision 3000, written 10 minutes ago, must stay restorable")
}
