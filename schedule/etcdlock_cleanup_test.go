package schedule

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// TestEtcdLockCancelledAcquireCleansUp ends an Acquire's context right
// after etcd created its waiter key (the mutex was held by the other
// replica): the key must go at once, not when the lease expires, so the
// other replica takes the next tick.
func TestEtcdLockCancelledAcquireCleansUp(t *testing.T) {
	srv, running := startEtcd(t)
	ctx := t.Context()
	const prefix = "/cleanup/"
	// A TTL far beyond the test's waits: a key left on the lease would
	// still be there when the other replica comes back.
	other := &EtcdLock{Client: newEtcdClient(t, srv), Prefix: prefix, TTL: time.Minute}

	attempt, cancelAttempt := context.WithCancel(ctx)
	defer cancelAttempt()
	cli := cancellingClient(t, srv, cancelAttempt)
	cancelling := &EtcdLock{Client: cli, Prefix: prefix, TTL: time.Minute}

	t1, t2 := utc("2026-01-01T01:00:00Z"), utc("2026-01-01T02:00:00Z")
	held, err := other.Acquire(ctx, "job", t1)
	require.NoError(t, err)

	_, err = cancelling.Acquire(attempt, "job", t1)
	require.ErrorIs(t, err, context.Canceled, "the attempt ended with its context")
	require.NoError(t, held.Release(ctx, true))

	resp, err := other.Client.Get(ctx, prefix+"lock/", clientv3.WithPrefix())
	require.NoError(t, err)
	require.Empty(t, resp.Kvs, "no lock key left behind")
	held, err = other.Acquire(ctx, "job", t2)
	require.NoError(t, err, "the next tick is not blocked by the cancelled attempt")
	require.NoError(t, held.Release(ctx, true))

	require.NoError(t, cli.Close())
	require.NoError(t, other.Client.Close())
	goleak.VerifyNone(t, running)
}

// cancellingClient returns a client that calls cancel as soon as a
// transaction (the mutex's attempt to create its key) has been answered.
func cancellingClient(t *testing.T, srv *etcdtest.Server, cancel context.CancelFunc) *clientv3.Client {
	t.Helper()
	intercept := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if method == "/etcdserverpb.KV/Txn" && err == nil {
			cancel()
		}
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(intercept)}})
	require.NoError(t, err)
	return cli
}
