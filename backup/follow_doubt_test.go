package backup_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
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
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// blindManifest loses every answer about the first delta segment's
// manifest (its PUT, which MinIO stores, and the read-backs after it)
// until the follower reports the failed attempt: a store that went down
// right after it wrote the manifest, and came back.
type blindManifest struct {
	mu   sync.Mutex
	path string
	open atomic.Bool
}

func (b *blindManifest) match(r *http.Request) bool {
	if b.open.Load() || !strings.HasSuffix(r.URL.Path, backup.ManifestSuffix) || !strings.Contains(r.URL.Path, "-delta-") {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.path == "" && r.Method == http.MethodPut {
		b.path = r.URL.Path
	}
	return r.URL.Path == b.path
}

func (b *blindManifest) ObserveFollow(e backup.FollowEvent) {
	if e.Kind == backup.SegmentFailed {
		b.open.Store(true)
	}
}

// TestFollowerRetryFindsCommitInDoubt: the commit of a segment lands, but
// its answer and the read-back after it are lost, so the attempt fails in
// doubt. The next attempt must find the manifest the first one wrote
// instead of committing the segment a second time: the chain holds each
// revision once.
func TestFollowerRetryFindsCommitInDoubt(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	direct := newS3(t, srv, bucket)
	proxy := faultproxy.StartHTTP(t, srv.Endpoint())
	opts := srv.S3Options(bucket)
	opts.Endpoint, opts.MaxRetries = proxy.Addr(), 1
	through, err := s3.New(opts)
	require.NoError(t, err)
	blind := &blindManifest{}
	proxy.SetRules(faultproxy.Rule{Name: "blind", Match: blind.match, Action: faultproxy.LoseAnswer})

	f, rec := doubtFollower(t, etcd, backup.Target{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: through}}, direct, blind)
	last := followThirtyPuts(t, cli, f, rec)
	require.True(t, blind.open.Load(), "an attempt failed in doubt")
	require.Positive(t, proxy.Fired()["blind"])
	requireChainOnce(t, direct, last)
}

// doubtFollower returns a follower of etcd into target, catalogued in
// catalog, with short flush and retry intervals, whose events go to a
// segmentRanges it returns and to observer.
func doubtFollower(t *testing.T, etcd *etcdtest.Server, target backup.Target, catalog backup.Catalog, observer backup.FollowObserver) (*backup.Follower, *segmentRanges) {
	t.Helper()
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	rec := &segmentRanges{}
	return &backup.Follower{
		Client:        etcd.Client(t),
		Pipeline:      &backup.Pipeline{Snapshotter: snapshotter, Compression: backup.None},
		Cluster:       "prod-a",
		Targets:       []backup.Target{target},
		Catalogs:      []backup.Catalog{catalog},
		FlushInterval: 100 * time.Millisecond,
		RetryInterval: 50 * time.Millisecond,
		Observer:      backup.FollowObservers{rec, observer},
	}, rec
}

// followThirtyPuts runs f until it committed 30 puts made while it runs,
// stops it, and returns the revision of the last put.
func followThirtyPuts(t *testing.T, cli *clientv3.Client, f *backup.Follower, rec *segmentRanges) int64 {
	t.Helper()
	ctx := t.Context()
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(fctx) }()
	require.Eventually(t, rec.started.Load, 30*time.Second, 10*time.Millisecond)
	var last int64
	for i := range 30 {
		resp, err := cli.Put(ctx, fmt.Sprintf("/k/%d", i%5), fmt.Sprintf("v%d", i))
		require.NoError(t, err)
		last = resp.Header.Revision
		time.Sleep(10 * time.Millisecond)
	}
	require.Eventually(t, func() bool { return rec.last() >= last }, 30*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	return last
}

// requireChainOnce checks that c's chain of prod-a holds each revision
// once, with no gap, up to last, and no invalid entry.
func requireChainOnce(t *testing.T, c backup.Catalog, last int64) {
	t.Helper()
	entries, err := backup.ListBackups(t.Context(), c, "prod-a")
	require.NoError(t, err)
	var prev int64
	for _, e := range entries {
		require.NotEqual(t, backup.KindInvalid, e.Kind, "invalid entry %s: %v", e.Key, e.Problem)
		if e.Kind != backup.KindDelta {
			continue
		}
		if prev != 0 {
			require.Equal(t, prev+1, e.Manifest.FirstRevision, "segment %s: no gap, no double", e.ID)
		}
		prev = e.Manifest.LastRevision
	}
	require.Equal(t, last, prev, "the chain ends at the last revision written")
}

// TestFollowerRetryWithoutReadPermission: a writer whose credentials may
// put objects but not get them (a common hardening) cannot read back the
// manifest of an attempt whose commit is in doubt. Its next attempt must
// store the segment anew, as before the read-back existed, rather than
// wait for a read the store never allows: a segment stored twice costs
// storage (restore replays each revision once), a follower that stops
// storing loses the revisions after it.
func TestFollowerRetryWithoutReadPermission(t *testing.T) {
	ctx := t.Context()
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	direct := newS3(t, srv, bucket)
	proxy := faultproxy.StartHTTP(t, srv.Endpoint())
	opts := srv.S3Options(bucket)
	opts.Endpoint, opts.MaxRetries = proxy.Addr(), 1
	through, err := s3.New(opts)
	require.NoError(t, err)
	delta := func(r *http.Request) bool {
		return strings.HasSuffix(r.URL.Path, backup.ManifestSuffix) && strings.Contains(r.URL.Path, "-delta-")
	}
	proxy.SetRules(
		faultproxy.Rule{Name: "lost", Times: 1, Action: faultproxy.LoseAnswer,
			Match: func(r *http.Request) bool { return r.Method == http.MethodPut && delta(r) }},
		faultproxy.Rule{Name: "denied", Action: faultproxy.AccessDenied,
			Match: func(r *http.Request) bool { return r.Method == http.MethodGet && delta(r) }},
	)

	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	rec := &segmentRanges{}
	f := &backup.Follower{
		Client:        cli,
		Pipeline:      &backup.Pipeline{Snapshotter: snapshotter, Compression: backup.None},
		Cluster:       "prod-a",
		Targets:       []backup.Target{{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: through}}},
		Catalogs:      []backup.Catalog{direct},
		FlushInterval: 100 * time.Millisecond,
		RetryInterval: 50 * time.Millisecond,
		Observer:      rec,
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(fctx) }()
	require.Eventually(t, rec.started.Load, 30*time.Second, 10*time.Millisecond)
	var last int64
	for i := range 30 {
		resp, err := cli.Put(ctx, fmt.Sprintf("/k/%d", i%5), fmt.Sprintf("v%d", i))
		require.NoError(t, err)
		last = resp.Header.Revision
		time.Sleep(10 * time.Millisecond)
	}
	require.Eventually(t, func() bool { return rec.last() >= last }, 30*time.Second, 10*time.Millisecond,
		"the follower stores the revisions after a commit it cannot read back")
	cancel()
	require.NoError(t, <-done)
	require.Positive(t, proxy.Fired()["lost"])
	require.Positive(t, proxy.Fired()["denied"])

	// The segment is stored twice (the manifest of the attempt in doubt
	// landed); restore plans each revision once, from one of the two.
	entries, err := backup.ListBackups(ctx, direct, "prod-a")
	require.NoError(t, err)
	ranges := map[[2]int64]int{}
	for _, e := range entries {
		if e.Kind == backup.KindDelta {
			ranges[[2]int64{e.Manifest.FirstRevision, e.Manifest.LastRevision}]++
		}
	}
	require.Contains(t, slices.Collect(maps.Values(ranges)), 2, "a segment stored twice: %v", ranges)
	plan, err := restore.FindPoint(ctx, []restore.Source{{Name: "minio", Catalog: direct}}, restore.Point{Cluster: "prod-a", Revision: last})
	require.NoError(t, err)
	next := plan.Full.Manifest.Etcd.Revision.Low + 1
	for _, s := range plan.Segments {
		require.Equal(t, next, s.Manifest.FirstRevision, "segment %s: each revision once", s.ID)
		next = s.Manifest.LastRevision + 1
	}
	require.Equal(t, last+1, next)
}

// failures counts a follower's failed segment attempts.
type failures struct{ n atomic.Int64 }

func (f *failures) ObserveFollow(e backup.FollowEvent) {
	if e.Kind == backup.SegmentFailed {
		f.n.Add(1)
	}
}

// TestFollowerDoubtReadBacksBounded: a store that answers 500 to every
// manifest write leaves each attempt's commit in doubt. The read-backs of
// the attempts before stay bounded per attempt, instead of growing with
// the length of the outage.
func TestFollowerDoubtReadBacksBounded(t *testing.T) {
	ctx := t.Context()
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	direct := newS3(t, srv, bucket)
	proxy := faultproxy.StartHTTP(t, srv.Endpoint())
	opts := srv.S3Options(bucket)
	opts.Endpoint, opts.MaxRetries = proxy.Addr(), 1
	through, err := s3.New(opts)
	require.NoError(t, err)
	delta := func(r *http.Request) bool {
		return strings.HasSuffix(r.URL.Path, backup.ManifestSuffix) && strings.Contains(r.URL.Path, "-delta-")
	}
	proxy.SetRules(
		faultproxy.Rule{Name: "broken", Action: faultproxy.InternalError,
			Match: func(r *http.Request) bool { return r.Method == http.MethodPut && delta(r) }},
		faultproxy.Rule{Name: "reads", Action: faultproxy.Delay,
			Match: func(r *http.Request) bool { return r.Method == http.MethodGet && delta(r) }},
	)
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	rec, fails := &segmentRanges{}, &failures{}
	f := &backup.Follower{
		Client:             cli,
		Pipeline:           &backup.Pipeline{Snapshotter: snapshotter, Compression: backup.None},
		Cluster:            "prod-a",
		Targets:            []backup.Target{{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: through}}},
		Catalogs:           []backup.Catalog{direct},
		FlushInterval:      50 * time.Millisecond,
		RetryInterval:      time.Millisecond,
		FinalCommitTimeout: 100 * time.Millisecond,
		Observer:           backup.FollowObservers{rec, fails},
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(fctx) }()
	require.Eventually(t, rec.started.Load, 30*time.Second, 10*time.Millisecond)
	_, err = cli.Put(ctx, "/k", "v")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return fails.n.Load() >= 40 }, 30*time.Second, 10*time.Millisecond)
	cancel()
	<-done
	n, reads := fails.n.Load(), int64(proxy.Fired()["reads"])
	t.Logf("%d failed attempts, %d manifest reads", n, reads)
	// Each attempt reads its own manifest back, and at most 8 earlier ones;
	// FinalCommitTimeout's last attempt too.
	require.LessOrEqual(t, reads, 10*(n+2))
}

// uploadFirst is an Uploader that refuses a Commit without its Upload, as
// a socket uploader does: it is no Catalog.
type uploadFirst struct {
	u        backup.BucketUploader
	mu       sync.Mutex
	uploaded map[string]bool
}

func (s *uploadFirst) Upload(ctx context.Context, m *backup.Manifest, r io.Reader) error {
	s.mu.Lock()
	s.uploaded[m.ID] = true
	s.mu.Unlock()
	return s.u.Upload(ctx, m, r)
}

func (s *uploadFirst) Commit(ctx context.Context, m *backup.Manifest) error {
	s.mu.Lock()
	ok := s.uploaded[m.ID]
	delete(s.uploaded, m.ID)
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("commit %s: nothing was uploaded", m.ID)
	}
	return s.u.Commit(ctx, m)
}

func (s *uploadFirst) Discard(ctx context.Context, m *backup.Manifest) error {
	return s.u.Discard(ctx, m)
}

// TestFollowerCommitInDoubtOwnCatalog: an Uploader that is no Catalog (a
// socket uploader, say) with a catalog of its own: the retry finds the
// manifest of the attempt in doubt through the catalog and takes it as
// the commit, without asking the Uploader to commit it again.
func TestFollowerCommitInDoubtOwnCatalog(t *testing.T) {
	ctx := t.Context()
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	direct := newS3(t, srv, bucket)
	proxy := faultproxy.StartHTTP(t, srv.Endpoint())
	opts := srv.S3Options(bucket)
	opts.Endpoint, opts.MaxRetries = proxy.Addr(), 1
	through, err := s3.New(opts)
	require.NoError(t, err)
	blind := &blindManifest{}
	proxy.SetRules(faultproxy.Rule{Name: "blind", Match: blind.match, Action: faultproxy.LoseAnswer})
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	rec := &segmentRanges{}
	f := &backup.Follower{
		Client:   cli,
		Pipeline: &backup.Pipeline{Snapshotter: snapshotter, Compression: backup.None},
		Cluster:  "prod-a",
		Targets: []backup.Target{{Destination: "minio",
			Uploader: &uploadFirst{u: backup.BucketUploader{Bucket: through}, uploaded: map[string]bool{}}}},
		Catalogs:      []backup.Catalog{direct},
		FlushInterval: 100 * time.Millisecond,
		RetryInterval: 50 * time.Millisecond,
		Observer:      backup.FollowObservers{rec, blind},
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(fctx) }()
	require.Eventually(t, rec.started.Load, 30*time.Second, 10*time.Millisecond)
	var last int64
	for i := range 20 {
		resp, err := cli.Put(ctx, fmt.Sprintf("/k/%d", i%5), fmt.Sprintf("v%d", i))
		require.NoError(t, err)
		last = resp.Header.Revision
		time.Sleep(10 * time.Millisecond)
	}
	require.Eventually(t, func() bool { return rec.last() >= last }, 30*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.True(t, blind.open.Load(), "an attempt failed in doubt")
	entries, err := backup.ListBackups(ctx, direct, "prod-a")
	require.NoError(t, err)
	var prev int64
	for _, e := range entries {
		if e.Kind != backup.KindDelta {
			continue
		}
		if prev != 0 {
			require.Equal(t, prev+1, e.Manifest.FirstRevision, "segment %s: no gap, no double", e.ID)
		}
		prev = e.Manifest.LastRevision
	}
	require.Equal(t, last, prev)
}
