package replicate

import (
	"context"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/retention"
)

// TestPruneOfCopiesWrittenLongAfterTheirBackups: a new offsite target is
// seeded with the backups of the last days, so the store dates every
// copy's manifest days after its backup completed. The target's prune
// dates the copies by their own times (PlanOptions.Copies): KeepLast(2)
// deletes three of five. Backups written there with the same dates that
// are not copies are still misdated: kept, counted by no rule.
func TestPruneOfCopiesWrittenLongAfterTheirBackups(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	tb := time.Now().Add(-72 * time.Hour).Truncate(time.Second)
	for i := range 5 {
		namedFull(t, src, "full", tb.Add(time.Duration(i)*6*time.Hour), int64(10*(i+1)))
	}
	if rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true}); err != nil {
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
}
