package retention_test

import (
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
)

// TestPointInTimeScopeCutsOnlyAtItsOwnFull: a scoped plan (a replication
// job's, the copies alone) never cuts a chain at a full backup out of its
// scope. Here a synthetic full backup another writer put on the target
// continues a copied chain: its owner may delete it any time, so the
// copied segments before it stay, restorable from the chain's own copied
// full backup.
func TestPointInTimeScopeCutsOnlyAtItsOwnFull(t *testing.T) {
	f := fullEntry(0, 10) // the chain's full backup, a copy
	chain := f.ID
	s1 := segmentEntry(time.Hour, 11, 15, chain)
	s2 := segmentEntry(2*time.Hour, 16, 20, chain)
	syn := fullEntry(3*time.Hour, 20) // not a copy: another writer's
	syn.Manifest.Synthetic = &backup.SyntheticInfo{Base: f.ID, BaseRevision: 10, Chain: chain, Revision: 20, Segments: 2}
	syn.Manifest.Run = "theirs"
	base := fullEntry(4*time.Hour, 30) // a full backup of another chain, a copy
	s3 := segmentEntry(50*time.Hour, 21, 40, chain)
	entries := []backup.Entry{f, s1, s2, syn, base, s3}
	for _, e := range entries {
		if e.Manifest.Run == "" {
			e.Manifest.Run = "copy"
		}
	}
	now := chainEpoch.Add(52 * time.Hour)
	plan, err := retention.MakePlan("c", entries, retention.KeepLast(5), now,
		retention.PlanOptions{Scope: func(m *backup.Manifest) bool { return m.Run == "copy" }})
	if err != nil {
		t.Fatal(err)
	}
	plan, err = retention.PointInTime(24 * time.Hour).Apply(plan)
	if err != nil {
		t.Fatal(err)
	}
	var kept []backup.Entry
	for _, d := range plan.Decisions {
		if d.Action == retention.Keep && d.Entry.ID != syn.ID {
			kept = append(kept, d.Entry)
		}
		if d.Action == retention.Delete && d.Entry.ID == syn.ID {
			t.Fatalf("the other writer's synthetic full backup deleted")
		}
	}
	// Without the other writer's synthetic full backup, the chain's points
	// still restore from the copies kept.
	for _, rev := range []int64{30, 35, 40} {
		if !restorable(kept, rev) {
			for _, d := range plan.Decisions {
				t.Logf("%s %s: %s", d.Action, d.Entry.ID, d.Reason)
			}
			t.Fatalf("revision %d not restorable from the copies kept", rev)
		}
	}
}
