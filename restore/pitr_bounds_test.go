package restore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/faultproxy"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// runFollower runs f until the returned stop is called; stop returns Run's
// error.
func runFollower(t *testing.T, f *backup.Follower) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(time.Minute):
			return errors.New("follower did not stop")
		}
	}
}

func boundsFollower(t *testing.T, etcd *etcdtest.Server, u backup.Uploader, b storage.Bucket, rec backup.FollowObserver) *backup.Follower {
	t.Helper()
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	return &backup.Follower{Client: etcd.Client(t), Pipeline: &backup.Pipeline{Snapshotter: snapshotter}, Cluster: "prod-a",
		Targets: []backup.Target{{Destination: "mem", Uploader: u}}, Catalogs: []backup.Catalog{b},
		FlushInterval: 100 * time.Millisecond, RetryInterval: 50 * time.Millisecond, Observer: rec}
}

// TestFollowerSegmentSizeBound: a follower that resumes behind receives
// hundreds of revisions in one watch response; its segments are cut at the
// size bound between revisions, inside the response, and restore exactly.
func TestFollowerSegmentSizeBound(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	b := memBucket(t)
	rec := &followEvents{}
	f := boundsFollower(t, etcd, &backup.BucketUploader{Bucket: b}, b, rec)
	f.MaxSegmentBytes = 4096
	stop := runFollower(t, f)
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, stop())

	value := strings.Repeat("v", 512)
	var last int64
	for i := range 300 {
		resp, err := cli.Put(t.Context(), fmt.Sprintf("/k/%03d", i%50), value)
		require.NoError(t, err)
		last = resp.Header.Revision
	}
	rec = &followEvents{}
	f = boundsFollower(t, etcd, &backup.BucketUploader{Bucket: b}, b, rec)
	f.MaxSegmentBytes = 4096
	stop = runFollower(t, f)
	waitCommitted(t, rec, last)
	require.NoError(t, stop())

	entries, err := backup.ListBackups(t.Context(), b, "prod-a")
	require.NoError(t, err)
	n := 0
	for _, e := range entries {
		if e.Kind == backup.KindDelta {
			n++
			require.LessOrEqual(t, e.Manifest.Raw.Size, int64(4096+1024), "segment %s: the bound and one revision", e.ID)
		}
	}
	require.Greater(t, n, 20)
	restored, res, srv := restorePoint(t, b, restore.Point{Cluster: "prod-a", Revision: last})
	require.Equal(t, last, res.Revision)
	requireSameAt(t, cli, restored, last)
	srv.Stop()
}

// slowUploader takes delay for every upload.
type slowUploader struct {
	backup.Uploader
	delay time.Duration
}

func (s slowUploader) Upload(ctx context.Context, m *backup.Manifest, r io.Reader) error {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Uploader.Upload(ctx, m, r)
}

// slowFirstSegment stores a full backup in delay, the first segment in
// first, and the other segments at once.
type slowFirstSegment struct {
	slowUploader
	first    time.Duration
	segments atomic.Int32
}

func (s *slowFirstSegment) Upload(ctx context.Context, m *backup.Manifest, r io.Reader) error {
	switch {
	case !m.IsDelta():
		return s.slowUploader.Upload(ctx, m, r)
	case s.segments.Add(1) == 1:
		return slowUploader{s.Uploader, s.first}.Upload(ctx, m, r)
	}
	return s.slowUploader.Uploader.Upload(ctx, m, r)
}

// TestFollowerSlowStore: MinIO behind a proxy that delays every write by
// 300 ms, slower than Follower.SlowStore: the follower cancels its watch
// while a segment is stored (etcd's client would buffer the writes
// meanwhile) and watches again after it; the chain has no gap and no
// double, and restores exactly.
func TestFollowerSlowStore(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	proxy := faultproxy.StartHTTP(t, srv.Endpoint())
	opts := srv.S3Options(bucket)
	opts.Endpoint = proxy.Addr()
	slow, err := s3.New(opts)
	require.NoError(t, err)
	b := newS3(t, srv, bucket)
	proxy.SetRules(faultproxy.Rule{Name: "slow writes", Match: faultproxy.IsWrite, Action: faultproxy.Delay, Delay: 300 * time.Millisecond})
	rec := &followEvents{}
	f := boundsFollower(t, etcd, &backup.BucketUploader{Bucket: slow}, b, rec)
	f.SlowStore = 100 * time.Millisecond
	stop := runFollower(t, f)
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	last := writeFor(t, cli, "/w", 2*time.Second)
	waitCommitted(t, rec, last)
	require.NoError(t, stop())

	rec.mu.Lock()
	cancelled := 0
	for _, e := range rec.events {
		if e.Kind == backup.WatchRestarted && errors.Is(e.Err, backup.ErrSlowStore) {
			cancelled++
		}
	}
	rec.mu.Unlock()
	require.Positive(t, cancelled, "the watch was cancelled while a slow store ran")
	chains(t, b, "prod-a") // no gap, no double
	restored, res, srv2 := restorePoint(t, b, restore.Point{Cluster: "prod-a", Revision: last})
	require.Equal(t, last, res.Revision)
	requireSameAt(t, cli, restored, last)
	srv2.Stop()
}

// TestFollowerCompactionFasterThanFull: etcd compacts every 50 ms while
// the full backup takes a second to store. The watch opened before the
// full backup holds the revisions after it, so the chain starts (no
// ChainGap, no second full backup) and its end restores exactly.
func TestFollowerCompactionFasterThanFull(t *testing.T) {
	testFollowerCompactionFasterThanFull(t, 0)
}

// TestFollowerCompactionWhileHeldStored: as above, with segments so small
// that what the watch opened before the full backup held is cut into
// segments (the full backup takes four seconds to store, the first
// segment one and a half), before the chain's watch reads on: that watch continues the one that
// held, as etcd compacted meanwhile past where a new one would start.
func TestFollowerCompactionWhileHeldStored(t *testing.T) {
	testFollowerCompactionFasterThanFull(t, 2048)
}

func testFollowerCompactionFasterThanFull(t *testing.T, maxSegmentBytes int) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	b := memBucket(t)
	ctx, cancel := context.WithCancel(t.Context())
	compacting := make(chan struct{})
	go func() {
		defer close(compacting)
		for i := 0; ctx.Err() == nil; i++ {
			resp, err := cli.Put(ctx, fmt.Sprintf("/c/%d", i%20), fmt.Sprintf("v%d", i))
			if err == nil {
				_, _ = cli.Compact(ctx, resp.Header.Revision)
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	rec := &followEvents{}
	var u backup.Uploader = slowUploader{&backup.BucketUploader{Bucket: b}, time.Second}
	if maxSegmentBytes > 0 {
		u = &slowFirstSegment{slowUploader: slowUploader{&backup.BucketUploader{Bucket: b}, 4 * time.Second}, first: 1500 * time.Millisecond}
	}
	f := boundsFollower(t, etcd, u, b, rec)
	f.SlowStore = time.Minute
	f.MaxSegmentBytes = maxSegmentBytes
	stop := runFollower(t, f)
	require.Eventually(t, func() bool { return rec.count(backup.SegmentCommitted) >= 2 }, 30*time.Second, 10*time.Millisecond,
		"the chain starts although etcd compacts faster than a full backup is stored")
	cancel()
	<-compacting
	want, err := cli.Get(t.Context(), "", clientv3.WithPrefix())
	require.NoError(t, err)
	waitCommitted(t, rec, want.Header.Revision)
	require.NoError(t, stop())
	require.Zero(t, rec.count(backup.ChainGap), "%s", rec)
	require.Equal(t, 1, rec.count(backup.ChainStarted), "%s", rec)
	restored, res, srv := restorePoint(t, b, restore.Point{Cluster: "prod-a", Revision: want.Header.Revision})
	require.Equal(t, want.Header.Revision, res.Revision)
	requireSame(t, want, restored, want.Header.Revision)
	srv.Stop()
}
