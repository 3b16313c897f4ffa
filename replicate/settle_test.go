package replicate

import (
	"context"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/retention"
)

// TestPruneKeepsAChainACopyMayBeExtending: a copy has just written chain
// X's full backup and its first segments on the target (another job's
// copy may be writing the rest right now), and X ends before the oldest
// full backup the target's keep-last keeps. A prune by the chain rule
// without a window (replicate.ChainRule(0)) keeps X whole while the store
// wrote any of it within the grace; once it did so long before, X goes
// whole.
func TestPruneKeepsAChainACopyMayBeExtending(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	now := time.Now().Truncate(time.Second)
	x := namedFull(t, src, "full", now.Add(-48*time.Hour), 10)
	configSegment(t, src, x, "", 11, 14)
	namedFull(t, src, "full", now.Add(-3*time.Hour), 50)
	namedFull(t, src, "full", now.Add(-2*time.Hour), 60)
	if rep, err := copier(completedTimes(t, src), dst).Copy(ctx, "prod", Selection{All: true}); err != nil {
		t.Fatalf("copy: %v (%s)", err, outcomes(rep))
	}
	chains := ChainRule(0)
	prune := func(store retention.Store) *retention.Report {
		p := &retention.Pruner{Store: store, Destination: "dst", Policy: retention.KeepLast(2), Scope: IsCopy, Copies: IsCopy, Chains: &chains}
		rep, err := p.Prune(ctx, "prod")
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := prune(dst); rep.Count(retention.Deleted) != 0 {
		for _, it := range rep.Items {
			t.Logf("%s %s: %s", it.Outcome, it.Entry.ID, it.Reason)
		}
		t.Fatalf("a prune deleted %d objects of a chain copied a moment ago", rep.Count(retention.Deleted))
	}
	if rep := prune(completedTimes(t, dst)); rep.Count(retention.Deleted) != 2 {
		for _, it := range rep.Items {
			t.Logf("%s %s: %s", it.Outcome, it.Entry.ID, it.Reason)
		}
		t.Fatalf("a prune deleted %d objects of a chain copied long ago, want its full backup and segment", rep.Count(retention.Deleted))
	}
}
