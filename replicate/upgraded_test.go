package replicate

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
)

// TestCopyOfAConfigUpgradedMidChain: the follower of config "c" started its
// chain on a full backup of "full" and was upgraded mid-chain, so its
// older segments record no config (they count as "full"'s, the config of
// the chain's full backup) and its newer ones record "c". A copy of the
// name "c" brings the older segments too: c's segments continue them, and
// without them c's copies restore nothing.
func TestCopyOfAConfigUpgradedMidChain(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	f := full(t, src, 0, 10)
	segment(t, src, f, 11, 12)
	segment(t, src, f, 13, 14)
	stored(t, src, backup.Manifest{Format: backup.DeltaManifestFormat, Kind: backup.ManifestKindDelta, Config: "c",
		Name: "delta-15", Created: f.Created.Add(15 * time.Second), FirstRevision: 15, LastRevision: 16, Chain: f.ID},
		fmt.Appendf(nil, "segment %d-%d", 15, 16))

	rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true, Name: "c"})
	if err != nil {
		t.Fatalf("copy of c: %v (%s)", err, outcomes(rep))
	}
	if got := outcomes(rep); got != "copied copied copied copied" {
		t.Fatalf("copy of c: %q, want the chain's full backup and its three segments", got)
	}
	if n := len(listed(t, dst)); n != 4 {
		t.Fatalf("target holds %d backups, want 4", n)
	}
}
