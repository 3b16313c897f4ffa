package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/replicate"
)

// TestReplicationKeepsUpWithFollower copies, once a second, what a follow
// process flushing every second stores, and measures each segment's lag:
// from its commit on the source to its commit on the target.
func TestReplicationKeepsUpWithFollower(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	require.NoError(t, os.Mkdir(src, 0o700))
	require.NoError(t, os.Mkdir(dst, 0o700))
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	fl := startFollow(t, "--endpoints="+strings.Join(etcd.Endpoints(), ","), "--destination=file://"+src, "--cluster=prod",
		"--flush-interval=1s")
	require.Eventually(t, func() bool { return strings.Contains(fl.output(), "chain of prod ") }, 30*time.Second, 20*time.Millisecond)

	reg, err := destination.NewRegistry(destination.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close() })
	from, err := reg.Add(t.Context(), destination.Spec{Name: "primary", URL: "file://" + src})
	require.NoError(t, err)
	to, err := reg.Add(t.Context(), destination.Spec{Name: "offsite", URL: "file://" + dst})
	require.NoError(t, err)
	var lags []time.Duration
	c := &replicate.Copier{Source: from, SourceName: "primary", Target: replicate.DestinationTarget(to),
		Observer: replicate.ObserverFunc(func(e replicate.Event) {
			if e.Kind == replicate.Done && e.Item.Outcome == replicate.Copied && e.Item.Kind == backup.KindDelta {
				lags = append(lags, e.Time.Sub(e.Item.Created))
			}
		})}

	end := time.Now().Add(20 * time.Second)
	for i := 0; time.Now().Before(end); i++ {
		_, err := cli.Put(t.Context(), fmt.Sprintf("/lag/%d", i%50), fmt.Sprint(i))
		require.NoError(t, err)
		if i%10 == 0 {
			_, err := c.Copy(t.Context(), "prod", replicate.Selection{All: true})
			require.NoError(t, err)
		}
		time.Sleep(100 * time.Millisecond) // the write rate, not a synchronisation
	}
	require.NoError(t, fl.stop(t, syscall.SIGTERM))
	rep, err := c.Copy(t.Context(), "prod", replicate.Selection{All: true})
	require.NoError(t, err)
	require.Len(t, rep.Chains, 1)
	require.True(t, rep.Chains[0].Whole)

	require.NotEmpty(t, lags)
	slices.Sort(lags)
	p := func(q float64) time.Duration { return lags[min(len(lags)-1, int(q*float64(len(lags))))] }
	t.Logf("replication lag of %d segments: p50 %v, p99 %v, max %v", len(lags), p(0.5), p(0.99), lags[len(lags)-1])
	require.Less(t, p(0.5), 10*time.Second, "copies once a second keep up with a follower flushing every second")
}
