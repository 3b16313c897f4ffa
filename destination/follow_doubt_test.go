package destination_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/faultproxy"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage"
)

// lostManifest loses every answer about the first delta segment's
// manifest (its PUT, which MinIO stores, and the read-backs after it)
// until the follower reports the failed attempt.
type lostManifest struct {
	mu      sync.Mutex
	path    string
	open    atomic.Bool
	started atomic.Bool
	revMu   sync.Mutex
	rev     int64
}

func (b *lostManifest) match(r *http.Request) bool {
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

func (b *lostManifest) ObserveFollow(e backup.FollowEvent) {
	switch e.Kind {
	case backup.SegmentFailed:
		b.open.Store(true)
	case backup.ChainStarted, backup.ChainResumed:
		b.started.Store(true)
	case backup.SegmentCommitted:
		b.revMu.Lock()
		b.rev = max(b.rev, e.Committed)
		b.revMu.Unlock()
	}
}

func (b *lostManifest) committed() int64 {
	b.revMu.Lock()
	defer b.revMu.Unlock()
	return b.rev
}

// TestFollowerCommitInDoubtLockedWithMinIO: a follower's segment commit
// through a destination with ObjectLock lands, but its answer is lost; the
// next attempt finds the manifest in place and takes it as the commit. The
// manifest is locked and in the destination's inventory, as a commit that
// answered would have left it.
func TestFollowerCommitInDoubtLockedWithMinIO(t *testing.T) {
	srv := miniotest.Start(t)
	ctx := testCtx(t)
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{ObjectLocking: true})
	proxy := faultproxy.StartHTTP(t, srv.Endpoint())
	lost := &lostManifest{}
	proxy.SetRules(faultproxy.Rule{Name: "lost", Match: lost.match, Action: faultproxy.LoseAnswer})
	r := newRegistry(t, destination.Options{
		Secrets: destination.StaticSecrets{"minio": {AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey()}},
	})
	locked, err := r.Add(ctx, destination.Spec{Name: "locked",
		Credentials: destination.Credentials{Source: destination.SourceSecret, Secret: "minio"},
		URL:         fmt.Sprintf("s3://%s/site?endpoint=%s&insecure=true&region=us-east-1", bucket, proxy.Addr()),
		ObjectLock:  destination.ObjectLock{Mode: storage.Governance, RetainFor: 24 * time.Hour}})
	require.NoError(t, err)
	_, err = r.Sync(ctx, locked.Name()) // the inventory takes commits from now on
	require.NoError(t, err)

	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	f := &backup.Follower{
		Client:        cli,
		Pipeline:      &backup.Pipeline{Snapshotter: snapshotter, Compression: backup.None},
		Cluster:       "prod-a",
		Targets:       []backup.Target{locked.Target()},
		Catalogs:      []backup.Catalog{locked},
		FlushInterval: 100 * time.Millisecond,
		RetryInterval: 50 * time.Millisecond,
		Observer:      lost,
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(fctx) }()
	require.Eventually(t, lost.started.Load, 30*time.Second, 10*time.Millisecond)
	var last int64
	for i := range 20 {
		resp, err := cli.Put(ctx, fmt.Sprintf("/k/%d", i%5), fmt.Sprintf("v%d", i))
		require.NoError(t, err)
		last = resp.Header.Revision
		time.Sleep(10 * time.Millisecond)
	}
	require.Eventually(t, func() bool { return lost.committed() >= last }, 30*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.True(t, lost.open.Load(), "an attempt failed in doubt")
	require.Positive(t, proxy.Fired()["lost"])

	mc := srv.Client(t)
	inventory := map[string]bool{}
	for _, e := range locked.Inventory().Entries {
		inventory[e.ID] = true
	}
	entries, err := backup.ListBackups(ctx, locked, "prod-a")
	require.NoError(t, err)
	deltas := 0
	for _, e := range entries {
		if e.Kind != backup.KindDelta {
			continue
		}
		deltas++
		key := "site/" + backup.ClusterPrefix("prod-a") + backup.ManifestKey(e.Manifest.DataKey)
		mode, _, err := mc.GetObjectRetention(ctx, bucket, key, "")
		require.NoError(t, err, "manifest %s is locked", key)
		require.Equal(t, minio.Governance, *mode, key)
		require.True(t, inventory[e.ID], "segment %s is in the inventory", e.ID)
	}
	require.Positive(t, deltas)
}
