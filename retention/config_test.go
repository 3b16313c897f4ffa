package retention_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
)

// Two continuous configs: the follower of "c" started its chain on a full
// backup of "a", and records its config in its segments. a's prune (c
// among its Others) never deletes c's segments, even once a synthetic full
// backup of a continues that chain at its window's base; c's own prune
// owns them.
func TestSegmentsOfAConfigOnAnotherConfigsChain(t *testing.T) {
	f := rvFull("a", rvNow.AddDate(0, 0, -30), 1)
	entries := []backup.Entry{f}
	for d := 30; d > 0; d-- {
		rev := int64(30-d) * 1000
		s := rvSeg(rvNow.AddDate(0, 0, -d).Add(time.Hour), rev+2, rev+1001, f.ID)
		s.Manifest.Config = "c"
		entries = append(entries, s)
	}
	syn := rvFull("a", rvNow.AddDate(0, 0, -15), 15001)
	syn.Manifest.Synthetic = &backup.SyntheticInfo{Base: f.ID, BaseRevision: 1, Chain: f.ID, Revision: 15001, Segments: 15}
	entries = append(entries, syn)
	require.Equal(t, "c", retention.SegmentConfig(entries[1].Manifest))

	plan, err := retention.MakePlan("c", entries, retention.KeepLast(1), rvNow, retention.PlanOptions{Name: "a"})
	require.NoError(t, err)
	out, err := retention.ChainPolicy{Window: 7 * 24 * time.Hour, Others: []string{"c"}}.Apply(plan)
	require.NoError(t, err)
	for _, d := range out.Decisions {
		if d.Entry.Kind == backup.KindDelta {
			require.Equal(t, retention.Keep, d.Action, "a's prune: %s: %s", d.Entry.ID, d.Reason)
		}
	}
}
