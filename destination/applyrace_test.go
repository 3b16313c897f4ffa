package destination_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/memblob"

	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// TestApplyKeepsClientOpenedByCheck: an Apply that changes a destination
// without reopening it keeps the client a check opened while the Apply
// was under way, rather than the missing client it saw at its start.
func TestApplyKeepsClientOpenedByCheck(t *testing.T) {
	ctx := testCtx(t)
	var flakyOpens atomic.Int32
	slowOpening := make(chan struct{})
	release := make(chan struct{})
	r := newRegistry(t, destination.Options{Schemes: map[string]destination.Opener{
		// Fails the first open, then opens.
		"flaky": func(context.Context, destination.Location) (storage.Bucket, error) {
			if flakyOpens.Add(1) == 1 {
				return nil, errors.New("store not reachable yet")
			}
			return blob.New(memblob.OpenBucket(nil), nil), nil
		},
		// Blocks the open of its second location until released.
		"slow": func(_ context.Context, loc destination.Location) (storage.Bucket, error) {
			if loc.Params == "v=2" {
				close(slowOpening)
				<-release
			}
			return blob.New(memblob.OpenBucket(nil), nil), nil
		},
	}})
	specs := func(v string, interval time.Duration) destination.Desired {
		return destination.Desired{Default: "a", Destinations: []destination.Spec{
			{Name: "a", URL: "flaky://a/p", CheckInterval: interval},
			{Name: "b", URL: "slow://b/p?v=" + v},
		}}
	}
	_, err := r.Apply(ctx, specs("1", time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 1, flakyOpens.Load(), "the first open failed")

	done := make(chan error, 1)
	go func() {
		_, err := r.Apply(ctx, specs("2", 2*time.Hour)) // a: no reopen; b: reopen, held
		done <- err
	}()
	<-slowOpening
	st, err := r.Check(ctx, "a") // opens a's client meanwhile
	require.NoError(t, err)
	require.True(t, st.Available(), "%+v", st)
	close(release)
	require.NoError(t, <-done)

	d, err := r.Get("a")
	require.NoError(t, err)
	require.Equal(t, 2*time.Hour, d.Spec().CheckInterval)
	require.NoError(t, d.Put(ctx, "prod-a/x", strings.NewReader("x"), nil), "the client the check opened is in use")
}
