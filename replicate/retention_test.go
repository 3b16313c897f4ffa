package replicate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
)

// TestCopySelectsOnlyWhatRetentionKeeps copies with the target's retention
// in the selection: what that retention deletes is never copied, so a
// prune of the target followed by a copy copies nothing back.
func TestCopySelectsOnlyWhatRetentionKeeps(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	var fulls []*backup.Manifest
	for i := range 5 {
		fulls = append(fulls, full(t, src, i, int64(10*(i+1))))
	}
	keep2 := retention.KeepLast(2)
	sel := Selection{All: true, Retention: &keep2}
	rep, err := copier(completedTimes(t, src), dst).Copy(ctx, "prod", sel)
	if err != nil || outcomes(rep) != "copied copied" {
		t.Fatalf("copy: %v, %q", err, outcomes(rep))
	}
	var got []string
	for _, e := range listed(t, dst) {
		got = append(got, e.ID)
		if !IsCopy(e.Manifest) {
			t.Errorf("%s: a copy's manifest is not recognised as a copy", e.ID)
		}
	}
	if len(got) != 2 || got[0] != fulls[3].ID || got[1] != fulls[4].ID {
		t.Fatalf("target holds %v, want the two newest", got)
	}
	for _, e := range listed(t, src) {
		if IsCopy(e.Manifest) {
			t.Errorf("%s: a backup run's manifest taken for a copy", e.ID)
		}
	}
}

// TestCopyReportsANamedBackupLeftOut: a backup named by ID that the
// selection's point-in-time window leaves out is reported NotCopied with
// ErrLeftOut, and Copy's error matches ErrLeftOut (etcdbackup copy then
// fails), never skipped silently.
func TestCopyReportsANamedBackupLeftOut(t *testing.T) {
	src, dst := memBucket(), memBucket()
	now := time.Now().Truncate(time.Second)
	old := namedFull(t, src, "full", now.Add(-100*time.Hour), 5)
	namedFull(t, src, "full", now.Add(-72*time.Hour), 10) // the window's base
	namedFull(t, src, "full", now.Add(-time.Hour), 20)
	keep := retention.Policy{KeepWithin: 24 * time.Hour}
	chains := retention.PointInTime(24 * time.Hour)
	rep, err := copier(completedTimes(t, src), dst).Copy(context.Background(), "prod", Selection{IDs: []string{old.ID}, Retention: &keep, PointInTime: &chains})
	if !errors.Is(err, ErrLeftOut) {
		t.Fatalf("copy: %v; want ErrLeftOut", err)
	}
	if outcomes(rep) != "not-copied" || !errors.Is(rep.Items[0].Err, ErrLeftOut) {
		t.Fatalf("the named backup outside the window: %q %v", outcomes(rep), rep.Items)
	}
	if n := len(listed(t, dst)); n != 0 {
		t.Fatalf("the target holds %d backups", n)
	}
}

// TestCopyReportsANamedChainLeftOut: a chain named (Selection.Chains) that
// the selection's retention or point-in-time window leaves out whole is
// reported NotCopied with ErrLeftOut, its full backup and segment, and
// Copy's error matches ErrLeftOut: never copied as nothing without a word.
func TestCopyReportsANamedChainLeftOut(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	now := time.Now().Truncate(time.Second)
	old := namedFull(t, src, "full", now.Add(-48*time.Hour), 10)
	configSegment(t, src, old, "full", 11, 20)
	namedFull(t, src, "full", now.Add(-2*time.Hour), 50)
	keep1, window := retention.KeepLast(1), retention.PointInTime(time.Hour)
	for name, sel := range map[string]Selection{
		"keep-last": {Chains: []string{old.ID}, Retention: &keep1},
		"window":    {Chains: []string{old.ID}, Retention: &keep1, PointInTime: &window},
	} {
		rep, err := copier(completedTimes(t, src), dst).Copy(ctx, "prod", sel)
		if !errors.Is(err, ErrLeftOut) {
			t.Fatalf("%s: %v; want ErrLeftOut", name, err)
		}
		if outcomes(rep) != "not-copied not-copied" || !errors.Is(rep.Items[0].Err, ErrLeftOut) || !errors.Is(rep.Items[1].Err, ErrLeftOut) {
			t.Fatalf("%s: the named chain left out: %q %v", name, outcomes(rep), rep.Items)
		}
	}
	if n := len(listed(t, dst)); n != 0 {
		t.Fatalf("the target holds %d backups", n)
	}
}
