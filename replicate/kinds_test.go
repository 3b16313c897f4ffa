package replicate

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
)

// TestCopyRetentionCountsKeysJSONBackups: a replication job's retention
// selects and prunes keys-json backups as it does snapshots, counted
// apart: a copy with KeepLast(2) copies the newest two of five, and a
// target holding all five keeps two once pruned kind by kind (Kinds).
func TestCopyRetentionCountsKeysJSONBackups(t *testing.T) {
	ctx := context.Background()
	src, dst, all := memBucket(), memBucket(), memBucket()
	tb := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
	for i := range 5 {
		stored(t, src, backup.Manifest{Format: backup.DeltaManifestFormat, Kind: backup.ManifestKindKeysJSON, Name: "export", Keys: 1,
			Etcd: backup.EtcdInfo{Revision: backup.RevisionInfo{Low: int64(10 + i), High: int64(10 + i)}}, Created: tb.Add(time.Duration(i) * time.Minute)},
			fmt.Appendf(nil, "keys %d", i))
	}
	namedFull(t, src, "full", tb, 5)
	keep2 := retention.KeepLast(2)
	rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true, Retention: &keep2})
	if err != nil {
		t.Fatalf("copy: %v (%s)", err, outcomes(rep))
	}
	if n := len(listed(t, dst)); n != 3 {
		t.Fatalf("a copy with KeepLast(2) copied %d backups of 5 keys-json backups and a snapshot, want 3 (%s)", n, outcomes(rep))
	}
	if rep, err := copier(src, all).Copy(ctx, "prod", Selection{All: true}); err != nil {
		t.Fatalf("copy: %v (%s)", err, outcomes(rep))
	}
	for _, kind := range Kinds() {
		p := &retention.Pruner{Store: all, Destination: "all", Policy: keep2, Scope: IsCopy, Copies: IsCopy, Kind: kind}
		if _, err := p.Prune(ctx, "prod"); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(listed(t, all)); n != 3 {
		t.Fatalf("the target holds %d backups after a prune with KeepLast(2) of each kind, want 3", n)
	}
}
