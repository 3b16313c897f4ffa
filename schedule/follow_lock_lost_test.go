package schedule

import (
	"context"
	"io"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/storage"
)

// holdingBucket records the keys put through it and, while holding, makes
// every put wait until its context ends.
type holdingBucket struct {
	storage.Bucket
	mu      sync.Mutex
	holding bool
	held    chan struct{} // closed at the first put held
	puts    []string
}

func (b *holdingBucket) Put(ctx context.Context, key string, r io.Reader, opts *storage.PutOptions) error {
	b.mu.Lock()
	b.puts = append(b.puts, key)
	holding := b.holding
	if holding && b.held != nil {
		close(b.held)
		b.held = nil
	}
	b.mu.Unlock()
	if holding {
		<-ctx.Done()
		return ctx.Err()
	}
	return b.Bucket.Put(ctx, key, r, opts)
}

func (b *holdingBucket) hold(on bool) (held <-chan struct{}, puts int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holding = on
	if on {
		b.held = make(chan struct{})
		held = b.held
	}
	return held, len(b.puts)
}

func (b *holdingBucket) putsSince(n int) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.puts[n:])
}

// TestFollowerLostLockStoresNothing: of two replicas on one EtcdLock, the
// one that follows loses its lock (its lease revoked) while it stores a
// segment; the other takes the lock and follows. The first must not store
// the revisions it holds as a last segment once its lock is lost: the
// other follows the cluster now. The other resumes the chain without a
// gap.
func TestFollowerLostLockStoresNothing(t *testing.T) {
	defer func(d time.Duration) { followLockRetry = d }(followLockRetry)
	followLockRetry = 100 * time.Millisecond
	srv := etcdtest.Start(t)
	cli := newEtcdClient(t, srv)
	defer cli.Close()
	dests := newMemDestinations(t, "a")
	j := continuousJob()
	j.Destinations = []string{"a"}
	var (
		s       [2]*Scheduler
		buckets [2]*holdingBucket
		done    [2]chan error
	)
	for i := range s {
		lockCli := newEtcdClient(t, srv)
		defer lockCli.Close()
		buckets[i] = &holdingBucket{Bucket: dests["a"]}
		runner := etcdRunner(t, srv, dests)
		runner.Uploader = func(context.Context, string) (backup.Uploader, error) {
			return &backup.BucketUploader{Bucket: buckets[i]}, nil
		}
		var err error
		s[i], err = New(Config{Runner: runner, Lock: &EtcdLock{Client: lockCli, Prefix: "/locks/"}, Logger: testLogger(t)})
		require.NoError(t, err)
		require.NoError(t, s[i].Set(j))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done[i] = make(chan error, 1)
		go func() { done[i] <- s[i].Start(ctx) }()
		defer func() { cancel(); <-done[i] }()
	}
	following := func(i int) bool { st, _ := s[i].Get(j.ID); return st.Following }
	eventually(t, func() bool { return following(0) || following(1) }, "a replica follows")
	first := 0
	if following(1) {
		first = 1
	}
	other := 1 - first

	// The follower stores a segment, which waits; meanwhile its lock is
	// lost.
	held, _ := buckets[first].hold(true)
	put(t, cli, 5)
	select {
	case <-held:
	case <-time.After(waitFor):
		t.Fatal("the follower never stored a segment")
	}
	revokeFollowLock(t, cli, j.ID)
	_, mark := buckets[first].hold(false)
	eventually(t, func() bool { return following(other) }, "the other replica takes over")
	eventually(t, func() bool { st, _ := s[first].Get(j.ID); return st.FollowRestarts > 0 }, "the first follower ends")
	st, _ := s[first].Get(j.ID)
	assert.ErrorIs(t, st.FollowError, errLockLost)
	// The job's @every 1h runs on the real clock: a tick inside the test
	// is a scheduled full backup, which either replica may take. Only
	// segments are the follower's.
	assert.Empty(t, segmentKeys(buckets[first].putsSince(mark)), "the follower stored a segment after losing its lock")

	rev := put(t, cli, 10)
	deadline := time.Now().Add(waitFor)
	for lastRevision(t, dests["a"], "prod-a") < rev {
		require.True(t, time.Now().Before(deadline), "the other replica never stored revision %d", rev)
		time.Sleep(20 * time.Millisecond)
	}
	chainOf(t, dests["a"], "prod-a")
}

// revokeFollowLock revokes the lease of the holder of a job's continuous
// backup lock, as etcd does when the holder's keep-alives stop reaching
// it: the oldest key of the mutex is the holder's.
func revokeFollowLock(t *testing.T, cli *clientv3.Client, jobID string) {
	t.Helper()
	resp, err := cli.Get(t.Context(), "/locks/lock/"+url.PathEscape(FollowLockID(jobID))+"/",
		clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	require.NoError(t, err)
	require.NotEmpty(t, resp.Kvs, "the lock's keys")
	_, err = cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease))
	require.NoError(t, err)
}

// segmentKeys returns those of keys that are a segment's objects: their
// backup's name is "delta-<first revision>[-<attempt>]".
func segmentKeys(keys []string) []string {
	var out []string
	for _, k := range keys {
		if strings.Contains(path.Base(k), "-delta-") {
			out = append(out, k)
		}
	}
	return out
}
