package retention_test

import (
	"slices"
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

// The follower of continuous config "b" started its chain on a full backup
// of continuous config "a" and records "b" in its segments. a's prune (b
// among its Others) leaves b's segments to b, and must then keep the full
// backup they restore on top of, however far a's keep-last has moved on:
// deleting it leaves every restore point of b's chain without its base.
func TestAnotherConfigsSegmentsKeepTheirBase(t *testing.T) {
	fa := rvFull("a", rvNow.AddDate(0, 0, -10), 1)
	entries := []backup.Entry{fa}
	for d := 10; d > 0; d-- {
		rev := int64(10-d) * 1000
		s := rvSeg(rvNow.AddDate(0, 0, -d).Add(time.Hour), rev+2, rev+1001, fa.ID)
		s.Manifest.Config = "b"
		entries = append(entries, s)
	}
	// a's own newer full backups, the chain of b not continued by them.
	entries = append(entries, rvFull("a", rvNow.AddDate(0, 0, -3), 7000), rvFull("a", rvNow.AddDate(0, 0, -1), 9000))

	plan, err := retention.MakePlan("c", entries, retention.KeepLast(1), rvNow, retention.PlanOptions{Name: "a"})
	require.NoError(t, err)
	out, err := retention.ChainPolicy{Window: 2 * 24 * time.Hour, Others: []string{"b"}}.Apply(plan)
	require.NoError(t, err)
	for _, d := range out.Decisions {
		if d.Entry.ID == fa.ID {
			require.Equal(t, retention.Keep, d.Action, "a's prune deletes the base of b's chain: %s", d.Reason)
		}
	}
}

// The follower of continuous config "b" started its chain on a full backup
// of "a" and was upgraded mid-chain: its older segments record no config
// (and count as a's, the config of the chain's full backup), its newer ones
// record "b". a's prune, whose window's base is past the older segments,
// must not delete them while b's segments continue them: they are the
// only way from the chain's full backup to b's restore points.
func TestOlderSegmentsUnderAnotherConfigsSegmentsKept(t *testing.T) {
	fa := rvFull("a", rvNow.AddDate(0, 0, -10), 1)
	entries := []backup.Entry{fa}
	var older []string
	for d := 10; d > 0; d-- {
		rev := int64(10-d) * 1000
		s := rvSeg(rvNow.AddDate(0, 0, -d).Add(time.Hour), rev+2, rev+1001, fa.ID)
		if d > 5 {
			older = append(older, s.ID)
		} else {
			s.Manifest.Config = "b"
		}
		entries = append(entries, s)
	}
	entries = append(entries, rvFull("a", rvNow.AddDate(0, 0, -3), 7500), rvFull("a", rvNow.AddDate(0, 0, -1), 9500))

	plan, err := retention.MakePlan("c", entries, retention.KeepLast(1), rvNow, retention.PlanOptions{Name: "a"})
	require.NoError(t, err)
	out, err := retention.ChainPolicy{Window: 2 * 24 * time.Hour, Others: []string{"b"}}.Apply(plan)
	require.NoError(t, err)
	for _, d := range out.Decisions {
		if d.Entry.ID == fa.ID || slices.Contains(older, d.Entry.ID) {
			require.Equal(t, retention.Keep, d.Action, "a's prune: %s: %s", d.Entry.ID, d.Reason)
		}
	}
}
