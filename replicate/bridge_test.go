package replicate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
)

// TestCopyChainOnTopOfSyntheticFull copies a chain whose source was pruned
// by a point-in-time window: its full backup and first segments are gone,
// and a synthetic full backup continues it. The segments left are copied on
// top of the synthetic full backup, the chain whole from there; a copy
// whose selection holds the target's window copies none of what that
// window deletes, and brings back neither the chain's full nor its first
// segments.
func TestCopyChainOnTopOfSyntheticFull(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	f := full(t, src, 0, 10)
	s1 := segment(t, src, f, 11, 12)
	s2 := segment(t, src, f, 13, 14)
	syn := stored(t, src, backup.Manifest{Name: "full", Created: t0.Add(5 * time.Minute),
		Etcd:      backup.EtcdInfo{Revision: backup.RevisionInfo{Low: 14, High: 14}},
		Synthetic: &backup.SyntheticInfo{Base: f.ID, BaseRevision: 10, Chain: f.ID, Revision: 14, Segments: 2}},
		[]byte("synthetic "+strings.Repeat("y", 100)))
	s3 := segment(t, src, f, 15, 16)

	// The window's selection at a time when the synthetic full backup is
	// its base: the full and the segments before it are not needed.
	window := retention.PointInTime(time.Hour)
	keep := retention.KeepLast(1)
	c := copier(completedTimes(t, src), dst)
	c.Now = func() time.Time { return syn.Created.Add(2 * time.Hour) }
	rep, err := c.Copy(ctx, "prod", Selection{All: true, Retention: &keep, PointInTime: &window})
	if err != nil {
		t.Fatalf("copy: %v", err)
	}
	if got := outcomes(rep); got != "copied copied" {
		t.Fatalf("outcomes %q, want the synthetic full and the last segment", got)
	}
	if ch := rep.Chains; len(ch) != 1 || !ch[0].Whole || ch[0].Through != 16 {
		t.Fatalf("chains %+v", ch)
	}

	// The source pruned by its own window: the chain's full and first
	// segments are gone; a copy of everything copies what is left.
	for _, m := range []*backup.Manifest{f, s1, s2} {
		if err := src.Delete(ctx, "prod/"+backup.ManifestKey(m.DataKey)); err != nil {
			t.Fatal(err)
		}
	}
	dst2 := memBucket()
	rep, err = copier(src, dst2).Copy(ctx, "prod", Selection{All: true})
	if err != nil {
		t.Fatalf("copy of the pruned source: %v", err)
	}
	if got := outcomes(rep); got != "copied copied" {
		t.Fatalf("outcomes %q", got)
	}
	var ids []string
	for _, e := range listed(t, dst2) {
		ids = append(ids, e.ID)
	}
	slices.Sort(ids)
	if want := fmt.Sprint([]string{s3.ID, syn.ID}); fmt.Sprint(ids) != want {
		t.Fatalf("target holds %v, want %v", ids, want)
	}
}

// TestCopyNeverBridgesOntoAnotherWritersFull: the source's chain lost its
// full backup and first segment (pruned), and the target holds a
// synthetic full backup that claims to continue the chain, written there
// by another writer (a compaction on the target), which the source does
// not hold. The segments left are not copied on top of it: it was never
// checked against the source, and its writer deletes it when its own
// retention says so, leaving copied segments that restore from nothing.
func TestCopyNeverBridgesOntoAnotherWritersFull(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	f := full(t, src, 0, 10)
	s1 := segment(t, src, f, 11, 12)
	segment(t, src, f, 13, 14)
	segment(t, src, f, 15, 16)
	for _, m := range []*backup.Manifest{f, s1} {
		if err := src.Delete(ctx, "prod/"+backup.ManifestKey(m.DataKey)); err != nil {
			t.Fatal(err)
		}
	}
	stored(t, dst, backup.Manifest{Name: "full", Created: t0.Add(5 * time.Minute),
		Etcd:      backup.EtcdInfo{Revision: backup.RevisionInfo{Low: 12, High: 12}},
		Synthetic: &backup.SyntheticInfo{Base: f.ID, BaseRevision: 10, Chain: f.ID, Revision: 12, Segments: 1}},
		[]byte("another writer's synthetic full"))

	rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true})
	if err != nil {
		t.Fatalf("copy: %v", err)
	}
	if got := outcomes(rep); got != "not-copied not-copied" {
		t.Fatalf("outcomes %q, want the segments not copied onto another writer's full backup", got)
	}
	if ch := rep.Chains; len(ch) != 1 || ch[0].Whole {
		t.Fatalf("chains %+v", ch)
	}
	for _, e := range listed(t, dst) {
		if e.Kind == backup.KindDelta {
			t.Fatalf("the target holds segment %s", e.ID)
		}
	}
}
