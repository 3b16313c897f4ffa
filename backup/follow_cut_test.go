package backup_test

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
)

// slowFirstSegments delays the upload of the first slow delta segments,
// as a store that stalls for a while does; the others pass at once.
type slowFirstSegments struct {
	backup.Uploader
	delay time.Duration
	slow  int64
	n     atomic.Int64
}

func (u *slowFirstSegments) Upload(ctx context.Context, m *backup.Manifest, r io.Reader) error {
	if m.IsDelta() && u.n.Add(1) <= u.slow {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(u.delay):
		}
	}
	return u.Uploader.Upload(ctx, m, r)
}

// segmentRanges records the revisions of the segments a follower commits.
type segmentRanges struct {
	mu      sync.Mutex
	ranges  [][2]int64
	started atomic.Bool
}

func (s *segmentRanges) ObserveFollow(e backup.FollowEvent) {
	switch e.Kind {
	case backup.ChainStarted, backup.ChainResumed:
		s.started.Store(true)
	case backup.SegmentCommitted:
		s.mu.Lock()
		s.ranges = append(s.ranges, [2]int64{e.Revision, e.Committed})
		s.mu.Unlock()
	}
}

func (s *segmentRanges) last() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ranges) == 0 {
		return 0
	}
	return s.ranges[len(s.ranges)-1][1]
}

// TestFollowerCutInsideResponseWithSlowStore: a follower resumes behind
// a backlog that etcd delivers in responses of many revisions, while etcd
// takes writes; its first segments are cut inside such a response, and
// their store takes longer than SlowStore, so that responses arrive and
// are held meanwhile. The revisions past the cut are read again: the
// chain's segments continue each other exactly, with no revision skipped
// or stored twice.
func TestFollowerCutInsideResponseWithSlowStore(t *testing.T) {
	ctx := t.Context()
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	b, err := blob.Open(ctx, drivers.NewURLMux(nil), "mem://", nil)
	require.NoError(t, err)
	defer b.Close()
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	run := func(rec *segmentRanges, up backup.Uploader) (stop func()) {
		f := &backup.Follower{
			Client:          cli,
			Pipeline:        &backup.Pipeline{Snapshotter: snapshotter, Compression: backup.None},
			Cluster:         "prod-a",
			Targets:         []backup.Target{{Destination: "mem", Uploader: up}},
			Catalogs:        []backup.Catalog{b},
			FlushInterval:   time.Second,
			MaxSegmentBytes: 4 << 10,
			RetryInterval:   50 * time.Millisecond,
			SlowStore:       250 * time.Millisecond,
			Observer:        rec,
		}
		fctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- f.Run(fctx) }()
		require.Eventually(t, rec.started.Load, 30*time.Second, 10*time.Millisecond)
		return func() {
			cancel()
			require.NoError(t, <-done)
		}
	}
	first := &segmentRanges{}
	run(first, &backup.BucketUploader{Bucket: b})() // the chain's full backup
	start, err := cli.Get(ctx, "\x00", clientv3.WithCountOnly())
	require.NoError(t, err)
	from := start.Header.Revision + 1

	put := func(i int) int64 {
		resp, err := cli.Put(ctx, fmt.Sprintf("/k/%03d", i%50), fmt.Sprintf("value %d of some length", i))
		require.NoError(t, err)
		return resp.Header.Revision
	}
	for i := range 2500 {
		put(i)
	}
	// etcd takes writes while the follower catches up: what it delivers
	// while a segment is stored is held.
	wctx, stopWrites := context.WithCancel(ctx)
	var last atomic.Int64
	writes := make(chan struct{})
	go func() {
		defer close(writes)
		for i := 0; wctx.Err() == nil; i++ {
			resp, err := cli.Put(wctx, fmt.Sprintf("/w/%03d", i%50), "written while catching up")
			if err != nil {
				return
			}
			last.Store(resp.Header.Revision)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	rec := &segmentRanges{}
	stop := run(rec, &slowFirstSegments{Uploader: &backup.BucketUploader{Bucket: b}, delay: 600 * time.Millisecond, slow: 3})
	require.Eventually(t, func() bool { return rec.last() > 2500+from }, 60*time.Second, 20*time.Millisecond)
	stopWrites()
	<-writes
	end := last.Load()
	require.Eventually(t, func() bool { return rec.last() >= end }, 30*time.Second, 20*time.Millisecond)
	stop()

	rec.mu.Lock()
	defer rec.mu.Unlock()
	next := from
	for _, r := range rec.ranges {
		require.Equal(t, next, r[0], "segment %d..%d continues the chain exactly (segments %v)", r[0], r[1], rec.ranges)
		next = r[1] + 1
	}
}
