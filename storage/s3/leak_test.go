package s3_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// Uploads, failed ones included, and abandoned listings leave no goroutine
// behind once the transport's idle connections are closed.
func TestNoGoroutineLeaks(t *testing.T) {
	srv := miniotest.Start(t) // its output copiers run until cleanup
	ignore := goleak.IgnoreCurrent()

	tr := newBaseTransport(t)
	b, name := newBucket(t, srv, false, func(o *s3.Options) {
		o.PartSize = 5 * mib
		o.PartsInFlight = 3
		o.MaxRetries = 1
		o.Transport = tr
	})
	ctx := testCtx(t)

	require.NoError(t, b.Put(ctx, "ok/small", stream(1, 100), nil))
	require.NoError(t, b.Put(ctx, "ok/large", stream(2, 23*mib), nil))
	require.ErrorIs(t, b.Put(ctx, "failed", &failAfter{r: stream(3, 1<<40), n: 12 * mib, err: errBoom}, nil), errBoom)
	cctx, cancel := context.WithCancel(ctx)
	require.ErrorIs(t, b.Put(cctx, "cancelled", &cancelAfter{r: stream(4, 1<<40), n: 11 * mib, cancel: cancel}, nil), context.Canceled)
	require.ErrorIs(t, b.PutIfAbsent(ctx, "ok/large", stream(5, 23*mib), nil), storage.ErrExist)
	for i := range 5 {
		require.NoError(t, b.Put(ctx, fmt.Sprintf("list/%d", i), stream(1, 1), nil))
	}
	for _, err := range b.List(ctx, "list/") {
		require.NoError(t, err)
		break
	}
	rc, err := b.Get(ctx, "ok/large")
	require.NoError(t, err)
	require.NoError(t, rc.Close(), "close before the end")
	requireNoUploads(t, srv, name)

	tr.CloseIdleConnections()
	goleak.VerifyNone(t, ignore)
}
