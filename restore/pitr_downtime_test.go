package restore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/restore"
)

// Revisions committed while the follower was down are received when it
// watches again: a time inside the downtime is refused with a *GapError
// naming when the watch started (the state then is not known), and with
// NearestEarlier the state before the downtime is restored, with the gap
// reported.
func TestFindPointTimeInFollowerDowntimeIsGap(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	b := memBucket(t)
	rec := &followEvents{}
	stop := startFollower(t, cli, etcd.Endpoints(), b, "prod-a", rec)
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	r1, err := cli.Put(t.Context(), "/a", "1")
	require.NoError(t, err)
	waitCommitted(t, rec, r1.Header.Revision)
	require.NoError(t, stop())
	_, err = cli.Put(t.Context(), "/a", "2") // while the follower is down
	require.NoError(t, err)
	at := time.Now()
	r3, err := cli.Put(t.Context(), "/a", "3")
	require.NoError(t, err)
	rec2 := &followEvents{}
	stop = startFollower(t, cli, etcd.Endpoints(), b, "prod-a", rec2)
	waitCommitted(t, rec2, r3.Header.Revision)
	r4, err := cli.Put(t.Context(), "/a", "4")
	require.NoError(t, err)
	waitCommitted(t, rec2, r4.Header.Revision)
	require.NoError(t, stop())

	sources := []restore.Source{{Name: "minio", Catalog: b}}
	_, err = restore.FindPoint(t.Context(), sources, restore.Point{Cluster: "prod-a", Time: at})
	require.ErrorIs(t, err, restore.ErrNoChain, "a time while the follower was down")
	var gap *restore.GapError
	require.ErrorAs(t, err, &gap)
	require.False(t, gap.WatchStarted.IsZero(), "%v", err)
	require.Equal(t, r1.Header.Revision, gap.Nearest)
	t.Log(err)

	plan, err := restore.FindPoint(t.Context(), sources, restore.Point{Cluster: "prod-a", Time: at, NearestEarlier: true})
	require.NoError(t, err)
	require.NotNil(t, plan.Gap)
	_, res, _ := restorePoint(t, b, restore.Point{Cluster: "prod-a", Time: at, NearestEarlier: true})
	require.Equal(t, r1.Header.Revision, res.Revision, "the state before the downtime")

	// After the watch started, the time is known again.
	_, res, _ = restorePoint(t, b, restore.Point{Cluster: "prod-a", Time: time.Now()})
	require.Equal(t, r4.Header.Revision, res.Revision)
}
