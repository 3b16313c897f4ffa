package restore_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// etcdWatchers is how many watchers the etcd servers of this process hold
// (etcd's mvcc metrics, on the default registry).
func etcdWatchers(t *testing.T) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "etcd_debugging_mvcc_watcher_total" {
			n := 0.0
			for _, m := range mf.GetMetric() {
				n += m.GetGauge().GetValue()
			}
			return n
		}
	}
	return 0
}

// TestFollowerRecoveryClosesFirstPrewatch: etcd writes more than
// RecoveryRevisions while the follower's first full backup is stored, so
// the follower recovers at once, before its first watch: the watch opened
// before that first full backup is closed, not left open (etcd's client
// would buffer every write of the cluster for it until Run ends). Once the
// recovery is done, the follower holds one watch.
func TestFollowerRecoveryClosesFirstPrewatch(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	b := memBucket(t)
	rec := &followEvents{}
	// Relative to what earlier tests' servers left in the process's gauge.
	base := etcdWatchers(t)
	u := &watchersAtFull{slowUploader: slowUploader{&backup.BucketUploader{Bucket: b}, time.Second}, t: t, base: base}
	f := boundsFollower(t, etcd, u, b, rec)
	f.RecoveryRevisions = 50
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	writing := make(chan struct{})
	go func() {
		defer close(writing)
		for i := 0; ctx.Err() == nil && rec.count(backup.ChainStarted) == 0; i++ {
			_, _ = cli.Put(ctx, fmt.Sprintf("/w/%d", i%20), fmt.Sprintf("v%d", i))
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	stop := runFollower(t, f)
	require.Eventually(t, func() bool { return rec.count(backup.RecoveryDone) == 1 }, 30*time.Second, 10*time.Millisecond,
		"%s", rec)
	cancel()
	<-writing
	resp, err := cli.Put(t.Context(), "/after", "v")
	require.NoError(t, err)
	waitCommitted(t, rec, resp.Header.Revision)
	require.Eventually(t, func() bool { return etcdWatchers(t) == base+1 }, 10*time.Second, 20*time.Millisecond,
		"the follower holds %v watches", etcdWatchers(t)-base)
	require.NoError(t, stop())
	require.Eventually(t, func() bool { return etcdWatchers(t) == base }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, []bool{true, true}, u.one, "the recovery's full backup is taken with its own prewatch alone")
}

// watchersAtFull records, for each full backup stored through it, whether
// etcd then held one watch more than at base (the full's prewatch),
// waiting up to 10 s.
type watchersAtFull struct {
	slowUploader
	t    *testing.T
	base float64
	one  []bool
}

func (u *watchersAtFull) Upload(ctx context.Context, m *backup.Manifest, r io.Reader) error {
	if !m.IsDelta() {
		one := false
		for end := time.Now().Add(10 * time.Second); !one && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			one = etcdWatchers(u.t) == u.base+1
		}
		u.one = append(u.one, one)
	}
	return u.slowUploader.Upload(ctx, m, r)
}

// TestFollowerPrewatchNotCreated: etcd does not answer the request that
// creates the watch opened before the chain's first full backup (a member
// slow or cut off for watches; its other requests are answered): the full
// backup is taken without that watch once its creation times out, rather
// than the follower waiting in its run slot until Run ends.
func TestFollowerPrewatchNotCreated(t *testing.T) {
	etcd := etcdtest.Start(t)
	b := memBucket(t)
	rec := &followEvents{}
	f := boundsFollower(t, etcd, &backup.BucketUploader{Bucket: b}, b, rec)
	stall := grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
		streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if strings.HasSuffix(method, "/Watch") {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return streamer(ctx, desc, cc, method, opts...)
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{stall}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	f.Client = cli
	stop := runFollower(t, f)
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond,
		"the full backup waits for a watch etcd does not create: %s", rec)
	require.NoError(t, stop())
}
