package backup_test

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
)

// slowSegments delays the upload of every delta segment, as a slow store
// does; full backups pass at once.
type slowSegments struct {
	backup.Uploader
	delay time.Duration
}

func (u slowSegments) Upload(ctx context.Context, m *backup.Manifest, r io.Reader) error {
	if m.IsDelta() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(u.delay):
		}
	}
	return u.Uploader.Upload(ctx, m, r)
}

// lagEvents records the commits a follower reports.
type lagEvents struct {
	mu      sync.Mutex
	commits []backup.FollowEvent
	started bool
}

func (l *lagEvents) ObserveFollow(e backup.FollowEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch e.Kind {
	case backup.SegmentCommitted:
		l.commits = append(l.commits, e)
	case backup.ChainStarted, backup.ChainResumed:
		l.started = true
	}
}

// TestFollowerLagWhileCatchingUp: a follower that resumes far behind
// etcd, with a store that takes 150 ms a segment (past SlowStore, so each
// segment's revisions are received anew after it), catches up in many
// small segments. The lag it reports is how long the oldest revision not
// yet committed has been known to exist: it grows with the time spent
// catching up, instead of reading each segment's own store time.
func TestFollowerLagWhileCatchingUp(t *testing.T) {
	ctx := t.Context()
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	b, err := blob.Open(ctx, drivers.NewURLMux(nil), "mem://", nil)
	require.NoError(t, err)
	defer b.Close()
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	run := func(rec *lagEvents, delay time.Duration) (stop func()) {
		f := &backup.Follower{
			Client:          cli,
			Pipeline:        &backup.Pipeline{Snapshotter: snapshotter, Compression: backup.None},
			Cluster:         "prod-a",
			Targets:         []backup.Target{{Destination: "mem", Uploader: slowSegments{&backup.BucketUploader{Bucket: b}, delay}}},
			Catalogs:        []backup.Catalog{b},
			FlushInterval:   100 * time.Millisecond,
			MaxSegmentBytes: 2 << 10,
			RetryInterval:   100 * time.Millisecond,
			// Each slow store restarts the watch after the segment: what
			// the next segment holds is received anew, as from a watch
			// that delivers a long backlog slowly.
			SlowStore: 50 * time.Millisecond,
		}
		f.Observer = rec
		fctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- f.Run(fctx) }()
		require.Eventually(t, func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return rec.started }, 30*time.Second, 10*time.Millisecond)
		return func() {
			cancel()
			require.NoError(t, <-done)
		}
	}
	run(&lagEvents{}, 0)() // the chain's full backup

	var last int64
	for i := range 600 {
		resp, err := cli.Put(ctx, fmt.Sprintf("/k/%03d", i%50), fmt.Sprintf("value %d of some length", i))
		require.NoError(t, err)
		last = resp.Header.Revision
	}
	rec := &lagEvents{}
	resumed := time.Now()
	stop := run(rec, 150*time.Millisecond)
	require.Eventually(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.commits) > 0 && rec.commits[len(rec.commits)-1].Committed >= last
	}, 30*time.Second, 20*time.Millisecond)
	// Before the stop, which a busy machine may make slow: the time spent
	// catching up, not the time to end the follower.
	caughtUp := time.Since(resumed)
	stop()

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Greater(t, len(rec.commits), 5, "the backlog is caught up in many segments")
	var longest time.Duration
	for _, e := range rec.commits {
		if e.Committed < last {
			require.Positive(t, e.HeadRevision-e.Committed, "behind: lag in revisions")
		}
		longest = max(longest, e.Lag)
	}
	require.Greater(t, longest, caughtUp/2,
		"the lag reads the time spent behind (caught up in %s), not one segment's store time", caughtUp)
}
