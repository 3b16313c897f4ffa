package replicate

import (
	"context"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
)

// TestPruneOfCopiesWrittenLongAfterTheirBackups: a new offsite target is
// seeded with the backups of the last days, so the store dates every
// copy's manifest days after its backup completed. The source's store
// wrote each backup as it completed, which the copy records: the target's
// prune checks the copies' dates against that (PlanOptions.Copies), and
// KeepLast(2) deletes three of five. Backups written there with the same
// dates that are not copies are still misdated: kept, counted by no rule.
// A copy of the copies keeps the first store's times (pruned alike);
// copies from a source listed without times record none: misdated, kept.
func TestPruneOfCopiesWrittenLongAfterTheirBackups(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	tb := time.Now().Add(-72 * time.Hour).Truncate(time.Second)
	for i := range 5 {
		namedFull(t, src, "full", tb.Add(time.Duration(i)*6*time.Hour), int64(10*(i+1)))
	}
	if rep, err := copier(completedTimes(t, src), dst).Copy(ctx, "prod", Selection{All: true}); err != nil {
		t.Fatalf("copy: %v (%s)", err, outcomes(rep))
	}
	// A copy of the copies keeps the first store's times; copies from a
	// source listed without times record none and keep the old check.
	again, untimed := memBucket(), memBucket()
	if rep, err := copier(dst, again).Copy(ctx, "prod", Selection{All: true}); err != nil {
		t.Fatalf("copy: %v (%s)", err, outcomes(rep))
	}
	if rep, err := copier(&storeTimes{Bucket: src, times: map[string]time.Time{}}, untimed).Copy(ctx, "prod", Selection{All: true}); err != nil {
		t.Fatalf("copy: %v (%s)", err, outcomes(rep))
	}
	for i := range 3 {
		namedFull(t, dst, "direct", tb.Add(time.Duration(i)*6*time.Hour), int64(100+i))
	}
	p := &retention.Pruner{Store: dst, Destination: "dst", Policy: retention.KeepLast(2), Scope: IsCopy, Copies: IsCopy}
	rep, err := p.Prune(ctx, "prod")
	if err != nil {
		t.Fatal(err)
	}
	if n := rep.Count(retention.Deleted); n != 3 {
		for _, it := range rep.Items {
			t.Logf("%s %s: %s", it.Outcome, it.Entry.ID, it.Reason)
		}
		t.Fatalf("the target's retention KeepLast(2) deleted %d of 5 copies, want 3", n)
	}
	p = &retention.Pruner{Store: dst, Destination: "dst", Policy: retention.KeepLast(1), Name: "direct", Copies: IsCopy}
	rep, err = p.Prune(ctx, "prod")
	if err != nil {
		t.Fatal(err)
	}
	if n, m := rep.Count(retention.Deleted), len(rep.Plan.Misdated()); n != 0 || m != 3 {
		t.Fatalf("backups written on the target long after their dates, not copies: %d deleted, %d misdated; want 0 and 3", n, m)
	}
	for b, want := range map[storage.Bucket][2]int{again: {3, 0}, untimed: {0, 5}} {
		p = &retention.Pruner{Store: b, Destination: "dst", Policy: retention.KeepLast(2), Scope: IsCopy, Copies: IsCopy}
		rep, err = p.Prune(ctx, "prod")
		if err != nil {
			t.Fatal(err)
		}
		if n, m := rep.Count(retention.Deleted), len(rep.Plan.Misdated()); n != want[0] || m != want[1] {
			t.Fatalf("copies: %d deleted, %d misdated; want %v", n, m, want)
		}
	}
}

// TestPruneKeepsCopiesOfMisdatedBackups: a writer whose clock ran ten days
// slow stored five backups: the source's store wrote them ten days after
// their dates, and the source's prune keeps them as misdated. Copied, they
// record the source store's times: a prune of the target with a max-age
// of seven days keeps them all, misdated, instead of taking their dates
// for true and deleting all but the newest.
func TestPruneKeepsCopiesOfMisdatedBackups(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	tb := time.Now().Add(-10 * 24 * time.Hour).Truncate(time.Second)
	for i := range 5 {
		namedFull(t, src, "full", tb.Add(time.Duration(i)*6*time.Hour), int64(10*(i+1)))
	}
	if rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true}); err != nil {
		t.Fatalf("copy: %v (%s)", err, outcomes(rep))
	}
	for _, e := range listed(t, dst) {
		if !IsCopy(e.Manifest) || e.Manifest.SourceStored.IsZero() {
			t.Fatalf("the target lists %s, a copy %v, source's store time %v", e.ID, IsCopy(e.Manifest), e.Manifest.SourceStored)
		}
	}
	p := &retention.Pruner{Store: dst, Destination: "dst", Policy: retention.Policy{KeepLast: 1, MaxAge: 7 * 24 * time.Hour},
		Scope: IsCopy, Copies: IsCopy}
	rep, err := p.Prune(ctx, "prod")
	if err != nil {
		t.Fatal(err)
	}
	if n, m := rep.Count(retention.Deleted), len(rep.Plan.Misdated()); n != 0 || m != 5 {
		for _, it := range rep.Items {
			t.Logf("%s %s: %s", it.Outcome, it.Entry.ID, it.Reason)
		}
		t.Fatalf("copies of backups their store wrote ten days after their dates: %d deleted, %d misdated; want 0 and 5", n, m)
	}
}

// TestCopySelectsMisdatedBackupsTheSourceKeeps: config "slow" is written
// by a host whose clock runs ten days slow; its backups are the cluster's
// recent state, which the source's prune keeps as misdated. A replication
// job's selection (its retention, max-age 7d) checks their dates against
// the source's store times as that prune does: it selects them, and the
// target's prune of the copies keeps them (misdated) too, so they are not
// copied back and forth.
func TestCopySelectsMisdatedBackupsTheSourceKeeps(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	now := time.Now().Truncate(time.Second)
	for i := range 3 {
		namedFull(t, src, "slow", now.Add(-10*24*time.Hour).Add(time.Duration(i)*time.Hour), int64(100+10*i))
		namedFull(t, src, "good", now.Add(-3*time.Hour).Add(time.Duration(i)*time.Hour), int64(10+i))
	}
	pol := retention.Policy{KeepLast: 10, MaxAge: 7 * 24 * time.Hour}
	sp := &retention.Pruner{Store: src, Destination: "src", Policy: pol, DryRun: true}
	srep, err := sp.Prune(ctx, "prod")
	if err != nil {
		t.Fatal(err)
	}
	if n, m := srep.Count(retention.WouldDelete), len(srep.Plan.Misdated()); n != 0 || m != 3 {
		t.Fatalf("the source's own prune: %d would-delete, %d misdated; want 0 and 3", n, m)
	}
	rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true, Retention: &pol})
	if err != nil {
		t.Fatalf("copy: %v (%s)", err, outcomes(rep))
	}
	slow := 0
	for _, e := range listed(t, dst) {
		if e.Manifest.Name == "slow" {
			slow++
		}
	}
	if slow != 3 {
		t.Fatalf("the source keeps 3 misdated backups of config slow; the selection copied %d (%s)", slow, outcomes(rep))
	}
	p := &retention.Pruner{Store: dst, Destination: "dst", Policy: pol, Scope: IsCopy, Copies: IsCopy, DryRun: true}
	prep, err := p.Prune(ctx, "prod")
	if err != nil {
		t.Fatal(err)
	}
	if n := prep.Count(retention.WouldDelete); n != 0 {
		t.Errorf("the target's prune of the copies would delete %d", n)
	}
}
