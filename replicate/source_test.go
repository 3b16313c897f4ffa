package replicate

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
)

// killedBeforeCommit fails every commit: a copy killed between its data
// object and its manifest.
type killedBeforeCommit struct{ backup.Uploader }

func (killedBeforeCommit) Commit(context.Context, *backup.Manifest) error {
	return errors.New("killed before the commit")
}

// TestCopyResumedFromAnotherSource: a backup fanned out to stores A and B
// (each dating it by its own clock) is copied from A onto a target; the
// copy is killed between its data object and its manifest. A is retired
// and the copy runs again from B: it resumes its own data object (the
// copy's token does not depend on which store the backup was read from)
// and commits the backup, recording B's time.
func TestCopyResumedFromAnotherSource(t *testing.T) {
	ctx := context.Background()
	store, dst := memBucket(), memBucket()
	f := namedFull(t, store, "full", time.Now().Add(-time.Hour).Truncate(time.Second), 10)
	a := &storeTimes{Bucket: store, times: map[string]time.Time{f.ID: f.Completed}}
	b := &storeTimes{Bucket: store, times: map[string]time.Time{f.ID: f.Completed.Add(3 * time.Second)}}
	ca := copier(a, dst)
	ca.Target.Uploader = killedBeforeCommit{&backup.BucketUploader{Bucket: dst}}
	if rep, err := ca.Copy(ctx, "prod", Selection{All: true}); err == nil || rep.Count(Failed) != 1 {
		t.Fatalf("copy from A killed before its commit: err=%v outcomes=%s", err, outcomes(rep))
	}
	rep, err := copier(b, dst).Copy(ctx, "prod", Selection{All: true})
	if err != nil || rep.Count(Resumed) != 1 {
		t.Fatalf("copy from B: err=%v outcomes=%s; want resumed", err, outcomes(rep))
	}
	got := listed(t, dst)
	if len(got) != 1 || got[0].Kind != backup.KindBackup || !IsCopy(got[0].Manifest) ||
		!got[0].Manifest.SourceStored.Equal(b.times[f.ID]) {
		t.Fatalf("target holds %+v; want B's copy of %s", got, f.ID)
	}
	rep, err = copier(a, dst).Copy(ctx, "prod", Selection{All: true})
	if err != nil || rep.Count(Skipped) != 1 {
		t.Errorf("copy from A again: err=%v outcomes=%s; want skipped", err, outcomes(rep))
	}
}

// TestCopiesFromTwoSourcesCommitOnce: copies of one backup from two
// stores (fanned out to both) onto one target run at once: the copy from
// B resumes and commits the data object the copy from A wrote before A's
// commit. A's commit is then refused (B's manifest records another
// source's time): it must leave the data object B's manifest names.
func TestCopiesFromTwoSourcesCommitOnce(t *testing.T) {
	ctx := context.Background()
	store, dst := memBucket(), memBucket()
	f := namedFull(t, store, "full", time.Now().Add(-time.Hour).Truncate(time.Second), 10)
	a := &storeTimes{Bucket: store, times: map[string]time.Time{f.ID: f.Completed}}
	b := &storeTimes{Bucket: store, times: map[string]time.Time{f.ID: f.Completed.Add(3 * time.Second)}}
	var fromB *Report
	ca := copier(a, dst)
	ca.Target.Uploader = &beforeCommit{Uploader: &backup.BucketUploader{Bucket: dst}, hook: func() {
		var err error
		if fromB, err = copier(b, dst).Copy(ctx, "prod", Selection{All: true}); err != nil {
			t.Errorf("copy from B: %v", err)
		}
	}}
	rep, err := ca.Copy(ctx, "prod", Selection{All: true})
	t.Logf("from A: err=%v outcomes=%s; from B: %s", err, outcomes(rep), outcomes(fromB))
	got := listed(t, dst)
	if len(got) != 1 || got[0].Kind != backup.KindBackup {
		t.Fatalf("target holds %+v; want one committed backup with its data", got)
	}
	if _, err := copier(store, dst).Copy(ctx, "prod", Selection{All: true}); err != nil {
		t.Errorf("a copy after both: %v", err)
	}
	if _, err := dst.Stat(ctx, "prod/"+f.DataKey); err != nil {
		t.Fatalf("the committed backup's data object: %v", err)
	}
}

// beforeCommit runs hook once, before the first commit.
type beforeCommit struct {
	backup.Uploader
	hook func()
	done bool
}

func (u *beforeCommit) Commit(ctx context.Context, m *backup.Manifest) error {
	if !u.done {
		u.done = true
		u.hook()
	}
	if err := u.Uploader.Commit(ctx, m); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// TestIsCopyOfTheVersionsHashingSourceStored: copies committed by the
// versions whose token hashed the source's time stay copies.
func TestIsCopyOfTheVersionsHashingSourceStored(t *testing.T) {
	m := *namedFull(t, memBucket(), "full", t0, 10)
	m.Destination, m.SourceStored = "dst", t0.Add(2*time.Second)
	tokens, err := copyTokens(&m, true)
	if err != nil {
		t.Fatal(err)
	}
	m.Run = tokens[0]
	if !IsCopy(&m) {
		t.Error("a copy whose token hashed its SourceStored is not taken for a copy")
	}
	m.SourceStored = t0.Add(3 * time.Second)
	if IsCopy(&m) {
		t.Error("a copy whose SourceStored changed since its token is taken for a copy")
	}
}
