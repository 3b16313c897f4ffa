package replicate

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
)

// namedFull stores a full backup of config name at low, created at created.
func namedFull(t *testing.T, b storage.Bucket, name string, created time.Time, low int64) *backup.Manifest {
	return stored(t, b, backup.Manifest{Name: name, Created: created,
		Etcd: backup.EtcdInfo{Revision: backup.RevisionInfo{Low: low, High: low}}}, fmt.Appendf(nil, "full %s %d %s", name, low, strings.Repeat("x", 100)))
}

// configSegment stores a delta segment of chain recording config (none
// for an older version's).
func configSegment(t *testing.T, b storage.Bucket, chain *backup.Manifest, config string, first, last int64) *backup.Manifest {
	return stored(t, b, backup.Manifest{Format: backup.DeltaManifestFormat, Kind: backup.ManifestKindDelta, Config: config,
		Name: fmt.Sprintf("delta-%d", first), Created: chain.Created.Add(time.Duration(first) * time.Second),
		FirstRevision: first, LastRevision: last, Chain: chain.ID}, fmt.Appendf(nil, "segment %d-%d", first, last))
}

// storeTimes lists its bucket with every object of a backup dated by
// the backup's completion: a target whose copies were written as their
// backups were taken (a replication job keeping up).
type storeTimes struct {
	storage.Bucket
	times map[string]time.Time // backup ID -> modification time
}

func completedTimes(t *testing.T, b storage.Bucket) *storeTimes {
	times := map[string]time.Time{}
	for _, e := range listed(t, b) {
		times[e.ID] = e.Manifest.Completed
	}
	return &storeTimes{Bucket: b, times: times}
}

func (b *storeTimes) List(ctx context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error] {
	return func(yield func(storage.ObjectInfo, error) bool) {
		for info, err := range b.Bucket.List(ctx, prefix) {
			for id, tm := range b.times {
				if strings.Contains(info.Key, id) {
					info.ModTime = tm
				}
			}
			if !yield(info, err) {
				return
			}
		}
	}
}

func ids(entries []backup.Entry) map[string]bool {
	out := map[string]bool{}
	for _, e := range entries {
		out[e.ID] = true
	}
	return out
}

// TestCopyKeepLastSelectsALiveChain: a follower's chain started on full
// X runs on while three scheduled full backups are taken. A copy with a
// replication job's KeepLast(3) and no point-in-time window selects X
// and its whole chain, up to its newest segment: the chain reaches past
// the oldest full backup kept, as the target's prune keeps it.
func TestCopyKeepLastSelectsALiveChain(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	x := full(t, src, 0, 10)
	segment(t, src, x, 11, 100)
	segment(t, src, x, 101, 199)
	for i := 1; i <= 3; i++ {
		full(t, src, i, int64(100+30*i))
	}
	newest := segment(t, src, x, 200, 250) // after the three full backups
	keep3 := retention.KeepLast(3)
	rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true, Retention: &keep3})
	if err != nil {
		t.Fatalf("copy: %v (%s)", err, outcomes(rep))
	}
	got := ids(listed(t, dst))
	if !got[x.ID] || !got[newest.ID] || len(got) != 7 {
		t.Fatalf("the target holds %d backups (full X %v, newest segment %v), want the live chain whole and the three full backups: %s",
			len(got), got[x.ID], got[newest.ID], outcomes(rep))
	}
	// The target's prune keeps what was selected: the copy is stable.
	p := &retention.Pruner{Store: completedTimes(t, dst), Destination: "dst", Policy: keep3, Scope: IsCopy, Now: func() time.Time { return t0.Add(time.Hour) }}
	chains := ChainRule(0)
	p.Chains = &chains
	prep, err := p.Prune(ctx, "prod")
	if err != nil {
		t.Fatal(err)
	}
	if n := prep.Count(retention.Deleted); n != 0 {
		t.Fatalf("the target's prune deleted %d of the live chain's copies", n)
	}
}

// TestPruneOfCopiesDeletesAChainNoLongerNeeded: on a replication target
// without a point-in-time window, a copied chain whose full backup the
// job's retention deletes, and which ends before the oldest full backup
// kept, is deleted whole; before, its full backup and segments were kept
// for ever. A copy with the same retention does not select it again.
func TestPruneOfCopiesDeletesAChainNoLongerNeeded(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	x := full(t, src, 0, 10)
	segment(t, src, x, 11, 100)
	segment(t, src, x, 101, 120)
	for i := 1; i <= 4; i++ {
		full(t, src, i, int64(100+30*i))
	}
	if rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true}); err != nil {
		t.Fatalf("copy: %v (%s)", err, outcomes(rep))
	}
	keep3 := retention.KeepLast(3)
	chains := ChainRule(0)
	chains.Grace = time.Minute // the store wrote X's chain longer ago
	p := &retention.Pruner{Store: completedTimes(t, dst), Destination: "dst", Policy: keep3, Scope: IsCopy, Chains: &chains,
		Now: func() time.Time { return t0.Add(time.Hour) }}
	prep, err := p.Prune(ctx, "prod")
	if err != nil {
		t.Fatal(err)
	}
	if n := prep.Count(retention.Deleted); n != 4 {
		for _, it := range prep.Items {
			t.Logf("%s %s: %s", it.Outcome, it.Entry.ID, it.Reason)
		}
		t.Fatalf("the prune deleted %d copies, want 4: X, the oldest scheduled full backup and the chain's two segments", n)
	}
	rep, err := copier(completedTimes(t, src), dst).Copy(ctx, "prod", Selection{All: true, Retention: &keep3})
	if err != nil {
		t.Fatalf("copy: %v (%s)", err, outcomes(rep))
	}
	if n := rep.Count(Copied); n != 0 {
		t.Fatalf("the next copy copied %d backups back: %s", n, outcomes(rep))
	}
}

// TestNameScopedPruneLeavesNoHoleInAnotherNamesChain: config "c"'s
// follower started its chain on a full backup of config "full" and was
// upgraded mid-chain: its older segments record no config and count as
// "full"'s. Two replication jobs scoped to "c" and "full" share the
// target. The "full" job's point-in-time prune keeps those older
// segments: c's later segments on the chain, out of its scope, restore on
// top of them.
func TestNameScopedPruneLeavesNoHoleInAnotherNamesChain(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	tb := time.Now().Add(-3 * time.Hour).Truncate(time.Second)
	x := namedFull(t, src, "full", tb, 10)
	configSegment(t, src, x, "", 11, 12)
	configSegment(t, src, x, "", 13, 14)
	cseg := configSegment(t, src, x, "c", 15, 100)
	namedFull(t, src, "full", tb.Add(time.Minute), 30) // a later scheduled full backup of "full"
	// c's follower goes on: its newest segment is a minute old.
	stored(t, src, backup.Manifest{Format: backup.DeltaManifestFormat, Kind: backup.ManifestKindDelta, Config: "c",
		Name: "delta-101", Created: time.Now().Add(-time.Minute).Truncate(time.Second), FirstRevision: 101, LastRevision: 200, Chain: x.ID},
		[]byte("segment 101-200"))
	for _, name := range []string{"c", "full"} {
		if rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true, Name: name}); err != nil {
			t.Fatalf("copy %s: %v (%s)", name, err, outcomes(rep))
		}
	}
	// The "full" job's prune, as schedule.PipelineRunner.Prune runs it.
	chains := ChainRule(time.Hour)
	p := &retention.Pruner{Store: completedTimes(t, dst), Destination: "dst", Policy: retention.KeepLast(10), Name: "full",
		Scope: func(m *backup.Manifest) bool { return IsCopy(m) && OfName(m, "full") }, Copies: IsCopy, Chains: &chains}
	rep, err := p.Prune(ctx, "prod")
	if err != nil {
		t.Fatal(err)
	}
	revs := map[int64]bool{}
	for _, e := range listed(t, dst) {
		if e.Kind == backup.KindDelta {
			revs[e.Manifest.FirstRevision] = true
		}
	}
	if !revs[15] || !revs[11] || !revs[13] {
		for _, it := range rep.Items {
			t.Logf("%s %s: %s", it.Outcome, it.Entry.ID, it.Reason)
		}
		t.Fatalf("c's segment %s (15-100) on the target: %v; the segments 11-14 it continues: %v, %v", cseg.ID, revs[15], revs[11], revs[13])
	}
}
