package replicate

import (
	"context"
	"errors"
	"iter"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
)

// agedBucket lists the objects whose key contains one of old as stored
// age before the store's real time: a long pause of the copy.
type agedBucket struct {
	storage.Bucket
	mu  sync.Mutex
	old []string
	age time.Duration
}

func (b *agedBucket) List(ctx context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error] {
	return func(yield func(storage.ObjectInfo, error) bool) {
		for info, err := range b.Bucket.List(ctx, prefix) {
			b.mu.Lock()
			for _, id := range b.old {
				if strings.Contains(info.Key, id) {
					info.ModTime = info.ModTime.Add(-b.age)
				}
			}
			b.mu.Unlock()
			if !yield(info, err) {
				return
			}
		}
	}
}

// afterCommit runs hook after each commit.
type afterCommit struct {
	backup.Uploader
	hook func(m *backup.Manifest)
}

func (u *afterCommit) Commit(ctx context.Context, m *backup.Manifest) error {
	err := u.Uploader.Commit(ctx, m)
	if err == nil {
		u.hook(m)
	}
	return err
}

// TestCopyWritesAChainsSegmentsAfterItsFull: a copy writes chain C's
// full backup, then the other full backups it copies (an hour and a half
// of them: many large backups on a slow link), then, before, C's
// segments. The target's prune by ChainRule(0) (a replication job's,
// while `etcdbackup copy` backfills) runs after the last full backup: C's
// full backup was stored more than the grace before, so only segments
// written with it keep the chain whole. The copy writes them right after
// it, and the target never holds C's segments without its full backup.
func TestCopyWritesAChainsSegmentsAfterItsFull(t *testing.T) {
	ctx := context.Background()
	src, mem := memBucket(), memBucket()
	dst := &agedBucket{Bucket: mem, age: 90 * time.Minute}
	now := time.Now().Truncate(time.Second)
	c := namedFull(t, src, "full", now.Add(-48*time.Hour), 10)
	for r := int64(11); r < 300; r += 20 {
		configSegment(t, src, c, "", r, r+19)
	}
	g := namedFull(t, src, "full", now.Add(-1*time.Hour), 200)
	chains := ChainRule(0)
	cp := copier(completedTimes(t, src), dst)
	cp.Target.Uploader = &afterCommit{Uploader: &backup.BucketUploader{Bucket: dst}, hook: func(m *backup.Manifest) {
		if m.ID == c.ID {
			dst.mu.Lock()
			dst.old = append(dst.old, c.ID) // the copy of the other fulls takes 90 minutes
			dst.mu.Unlock()
		}
		if m.ID == g.ID {
			p := &retention.Pruner{Store: dst, Destination: "dst", Policy: retention.KeepLast(1), Scope: IsCopy, Copies: IsCopy, Chains: &chains}
			if _, err := p.Prune(ctx, "prod"); err != nil {
				t.Error(err)
			}
		}
	}}
	rep, err := cp.Copy(ctx, "prod", Selection{All: true})
	has, segs := map[string]bool{}, 0
	for _, e := range listed(t, mem) {
		has[e.ID] = true
		if e.Kind == backup.KindDelta {
			segs++
		}
	}
	if !has[c.ID] && segs > 0 {
		t.Fatalf("the target holds %d segments of chain %s without its full backup; the copy reported err=%v chains=%+v", segs, c.ID, err, rep.Chains)
	}
	if err != nil || len(rep.Chains) != 1 || !rep.Chains[0].Whole {
		t.Fatalf("copy: err=%v outcomes=%s chains=%+v", err, outcomes(rep), rep.Chains)
	}
}

// TestCopyReportsAChainWhoseFullWasPrunedMeanwhile: a prune deletes a
// chain's full backup from the target right after the copy committed it,
// while the copy goes on with its segments. The copy does not report
// the chain whole: it looks for the full backup again, reports the chain
// not whole and fails with ErrChainBaseGone.
func TestCopyReportsAChainWhoseFullWasPrunedMeanwhile(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	f := full(t, src, 0, 10)
	segment(t, src, f, 11, 20)
	segment(t, src, f, 21, 30)
	cp := copier(completedTimes(t, src), dst)
	cp.Target.Uploader = &afterCommit{Uploader: &backup.BucketUploader{Bucket: dst}, hook: func(m *backup.Manifest) {
		if m.ID == f.ID {
			if err := dst.Delete(ctx, "prod/"+backup.ManifestKey(m.DataKey)); err != nil {
				t.Error(err)
			}
		}
	}}
	rep, err := cp.Copy(ctx, "prod", Selection{All: true})
	if len(rep.Chains) != 1 || rep.Chains[0].Whole || !errors.Is(rep.Chains[0].Err, ErrChainBaseGone) {
		t.Fatalf("chains %+v; want chain %s not whole, its full backup gone", rep.Chains, f.ID)
	}
	if !errors.Is(err, ErrChainBaseGone) {
		t.Fatalf("copy: %v; want ErrChainBaseGone", err)
	}
}
