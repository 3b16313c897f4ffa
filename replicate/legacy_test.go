package replicate

import (
	"context"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
)

// TestCopyOfAnEarlierVersionIsNotACopy: a copy committed by a version
// before the copy token kept the source's run token, as a backup run
// fanned out to the target does. It is not taken for a copy: a copy skips
// it, and a replication job's retention keeps it.
func TestCopyOfAnEarlierVersionIsNotACopy(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	var old []*backup.Manifest
	for i := range 3 {
		m := full(t, src, i, int64(10*(i+1)))
		// What the earlier copy committed: the source's manifest with the
		// target's name, the source's token.
		was := *m
		was.Destination = "dst"
		data, err := src.Get(ctx, backup.ClusterPrefix("prod")+m.DataKey)
		if err != nil {
			t.Fatal(err)
		}
		up := &backup.BucketUploader{Bucket: dst}
		if err := up.Upload(ctx, &was, data); err != nil {
			t.Fatal(err)
		}
		data.Close()
		if err := up.Commit(ctx, &was); err != nil {
			t.Fatal(err)
		}
		old = append(old, &was)
	}
	for _, m := range old {
		if IsCopy(m) {
			t.Fatalf("%s: an earlier version's copy taken for a copy", m.ID)
		}
	}
	rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true})
	if err != nil || outcomes(rep) != "skipped skipped skipped" {
		t.Fatalf("copy: %v, %q", err, outcomes(rep))
	}
	plan, err := retention.MakePlan("prod", listed(t, dst), retention.KeepLast(1), t0.Add(time.Hour),
		retention.PlanOptions{Scope: IsCopy})
	if err != nil {
		t.Fatal(err)
	}
	if d := plan.Deletes(); len(d) != 0 {
		t.Fatalf("a replication job's retention deletes %d backups of an earlier version's copies", len(d))
	}
}
