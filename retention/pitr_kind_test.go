package retention_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
)

// TestPointInTimeKeepsToItsKind: the chain rule applied to a plan of
// keys-json backups (prune --kind=keys-json --point-in-time=1h) leaves the
// snapshot chain's segments alone.
func TestPointInTimeKeepsToItsKind(t *testing.T) {
	f1, f2 := fullEntry(0, 100), fullEntry(10*time.Hour, 1000)
	entries := []backup.Entry{f1, segmentEntry(time.Hour, 101, 500, f1.ID), segmentEntry(2*time.Hour, 501, 999, f1.ID), f2}
	now := chainEpoch.Add(12 * time.Hour)
	plan, err := retention.MakePlan("c", entries, retention.Policy{KeepWithin: time.Hour}, now, retention.PlanOptions{Kind: backup.KindKeysJSON})
	require.NoError(t, err)
	plan, err = retention.PointInTime(time.Hour).Apply(plan)
	require.NoError(t, err)
	for _, d := range plan.Decisions {
		t.Logf("%-7v %s: %s", d.Action, d.Entry.ID, d.Reason)
		if d.Entry.Kind == backup.KindDelta {
			require.Equal(t, retention.Keep, d.Action, "a keys-json prune deletes snapshot-chain segments")
		}
	}
}
