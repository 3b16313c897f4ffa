package replicate

import (
	"context"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
)

// TestCopyOfOneName: a selection of one backup name copies that name's
// full backups and the segments of their chains, and nothing of another
// name; its retention counts that name's backups alone.
func TestCopyOfOneName(t *testing.T) {
	ctx := context.Background()
	src, dst := memBucket(), memBucket()
	f := full(t, src, 0, 10)
	segment(t, src, f, 11, 12)
	segment(t, src, f, 13, 14)
	for i := range 3 {
		stored(t, src, backup.Manifest{Name: "other", Created: t0.Add(time.Duration(i+1) * time.Minute),
			Etcd: backup.EtcdInfo{Revision: backup.RevisionInfo{Low: int64(20 + i), High: int64(20 + i)}}}, []byte("other"))
	}
	keep := retention.KeepLast(1)
	rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true, Name: "full", Retention: &keep})
	if err != nil {
		t.Fatalf("copy: %v", err)
	}
	if got := outcomes(rep); got != "copied copied copied" {
		t.Fatalf("outcomes %q, want the full backup of the name and its two segments", got)
	}
	for _, e := range listed(t, dst) {
		if !OfName(e.Manifest, "full") {
			t.Errorf("%s of another name copied", e.ID)
		}
	}
}
