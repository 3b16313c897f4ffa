package restore_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/faultproxy"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// liveHeap returns the live heap after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestFollowerSlowStoreHoldsBoundedBytes: MinIO behind a proxy that delays
// every write by three seconds, and a SlowStore too long to act: while a
// segment is stored, etcd sends far more than the follower may hold (twice
// MaxSegmentBytes: eight writes, which arrive during a store even on a
// busy machine that puts a few a second). The follower keeps reading the watch, cancels it when
// what it holds passes the bound, and reads the rest again from etcd
// later; etcd's client does not buffer the writes meanwhile. The chain has
// no gap and restores exactly.
func TestFollowerSlowStoreHoldsBoundedBytes(t *testing.T) {
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
	rec := &followEvents{}
	f := boundsFollower(t, etcd, &backup.BucketUploader{Bucket: slow}, b, rec)
	f.SlowStore, f.MaxSegmentBytes = time.Minute, 256<<10
	stop := runFollower(t, f)
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	proxy.SetRules(faultproxy.Rule{Name: "slow writes", Match: faultproxy.IsWrite, Action: faultproxy.Delay, Delay: 3 * time.Second})
	before := liveHeap()
	value := strings.Repeat("v", 64<<10)
	const writes = 600 // 37.5 MiB
	var last int64
	for i := range writes {
		resp, err := cli.Put(t.Context(), fmt.Sprintf("/big/%03d", i%100), value)
		require.NoError(t, err)
		last = resp.Header.Revision
	}
	// Informative only: etcd runs in this process, and its own memory
	// (its raft log) moves by as much as the writes.
	t.Logf("live heap grew by %.1f MiB while %d MiB were written", float64(int64(liveHeap())-int64(before))/(1<<20), writes*64>>10)
	proxy.SetRules()
	waitCommitted(t, rec, last)
	require.NoError(t, stop())

	rec.mu.Lock()
	bounded, most := 0, int64(0)
	for _, e := range rec.events {
		if e.Kind == backup.WatchRestarted && errors.Is(e.Err, backup.ErrSlowStore) && e.RawBytes > 0 {
			bounded, most = bounded+1, max(most, e.RawBytes)
			// The bound, and the response that passed it.
			require.Less(t, e.RawBytes, int64(2*f.MaxSegmentBytes+1<<20), "held while a segment was stored")
		}
	}
	rec.mu.Unlock()
	t.Logf("%d watches cancelled, at most %d KiB held", bounded, most>>10)
	require.Positive(t, bounded, "the watch was cancelled when what arrived during a store passed the bound")
	chains(t, b, "prod-a") // no gap, no double
	restored, res, srv2 := restorePoint(t, b, restore.Point{Cluster: "prod-a", Revision: last})
	require.Equal(t, last, res.Revision)
	requireSameAt(t, cli, restored, last)
	srv2.Stop()
}
