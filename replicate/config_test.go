package replicate

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// TestCopyOfAContinuousConfigOnAnotherConfigsFull: a follower of config
// "c" starts its chain on the newest full backup of the cluster, config
// "daily"'s. A copy of the name "c" copies c's segments, with the full
// backup they restore on top of; a copy of "daily" copies that full backup
// and none of c's segments.
func TestCopyOfAContinuousConfigOnAnotherConfigsFull(t *testing.T) {
	ctx := t.Context()
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	src := memBucket()
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	targets := []backup.Target{{Destination: "src", Uploader: &backup.BucketUploader{Bucket: src}}}
	p := &backup.Pipeline{Snapshotter: snapshotter}
	if _, err := p.Run(ctx, backup.Request{Cluster: "prod", Name: "daily", Scheduled: true, Targets: targets}); err != nil {
		t.Fatal(err)
	}
	committed := make(chan int64, 100)
	f := &backup.Follower{Client: cli, Pipeline: p, Cluster: "prod", FullName: "c", Targets: targets,
		Catalogs: []backup.Catalog{src}, FlushInterval: 100 * time.Millisecond,
		Observer: backup.FollowObserverFunc(func(e backup.FollowEvent) {
			if e.Kind == backup.SegmentCommitted {
				committed <- e.Committed
			}
		})}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(fctx) }()
	var last int64
	for i := range 5 {
		r, err := cli.Put(ctx, fmt.Sprintf("/k%d", i), "v")
		if err != nil {
			t.Fatal(err)
		}
		last = r.Header.Revision
	}
	timeout := time.After(30 * time.Second)
	for got := int64(0); got < last; {
		select {
		case got = <-committed:
		case <-timeout:
			t.Fatalf("follower did not commit revision %d", last)
		}
	}
	cancel()
	if err := <-done; err != nil && ctx.Err() == nil && fctx.Err() == nil {
		t.Fatal(err)
	}

	dst := memBucket()
	rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true, Name: "c"})
	if err != nil {
		t.Fatalf("copy of c: %v", err)
	}
	var fulls, segs int
	for _, it := range rep.Items {
		if it.Outcome != Copied {
			t.Fatalf("%s %s: %v", it.ID, it.Outcome, it.Err)
		}
		if it.Kind == backup.KindDelta {
			segs++
		} else {
			fulls++
		}
	}
	if fulls != 1 || segs == 0 {
		t.Fatalf("copy of c: %d full backups and %d segments, want daily's full and c's segments", fulls, segs)
	}
	rep, err = copier(src, memBucket()).Copy(ctx, "prod", Selection{All: true, Name: "daily"})
	if err != nil {
		t.Fatalf("copy of daily: %v", err)
	}
	if got := outcomes(rep); got != "copied" {
		t.Fatalf("copy of daily: %q, want its full backup alone", got)
	}
}
