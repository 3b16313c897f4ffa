package restore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage"
)

// followEvents records a follower's events.
type followEvents struct {
	mu     sync.Mutex
	events []backup.FollowEvent
}

func (f *followEvents) ObserveFollow(e backup.FollowEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, e)
}

// committed returns the last revision committed on every target.
func (f *followEvents) committed() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var c int64
	for _, e := range f.events {
		if e.Kind == backup.SegmentCommitted {
			c = max(c, e.Committed)
		}
	}
	return c
}

func (f *followEvents) count(kind backup.FollowEventKind) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, e := range f.events {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// String lists the events so far, for a failure's message.
func (f *followEvents) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, e := range f.events {
		fmt.Fprintf(&b, "\n%s %s rev %d committed %d head %d chain %s", e.Time.Format("15:04:05.000"), e.Kind, e.Revision, e.Committed, e.HeadRevision, e.Chain)
		if e.Err != nil {
			fmt.Fprintf(&b, ": %v", e.Err)
		}
	}
	return b.String()
}

// startFollower runs a follower of cli into b until the returned stop is
// called; stop returns Run's error.
func startFollower(t *testing.T, cli *clientv3.Client, endpoints []string, b storage.Bucket, cluster string, rec backup.FollowObserver, recipients ...string) (stop func() error) {
	t.Helper()
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: endpoints})
	require.NoError(t, err)
	f := &backup.Follower{
		Client:        cli,
		Pipeline:      &backup.Pipeline{Snapshotter: snapshotter, Compression: backup.Zstd, Encryption: backup.Encryption{Recipients: recipients}},
		Cluster:       cluster,
		Targets:       []backup.Target{{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: b}}},
		Catalogs:      []backup.Catalog{b},
		FlushInterval: 200 * time.Millisecond,
		RetryInterval: 100 * time.Millisecond,
		Observer:      rec,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(time.Minute):
			return fmt.Errorf("follower did not stop")
		}
	}
}

// waitCommitted waits until the follower committed rev, for as long as it
// commits something every 30 s: a follower catching up with many
// segments on a busy machine may take longer in all, and one that stopped
// committing fails the test in 30 s.
func waitCommitted(t *testing.T, rec *followEvents, rev int64) {
	t.Helper()
	seen, deadline := rec.committed(), time.Now().Add(30*time.Second)
	for c := seen; c < rev; c = rec.committed() {
		if c > seen {
			seen, deadline = c, time.Now().Add(30*time.Second)
		}
		require.True(t, time.Now().Before(deadline), "follower did not commit revision %d: it committed %d, and nothing more for 30 s:%s", rev, c, rec)
		time.Sleep(20 * time.Millisecond)
	}
}

// workload writes puts, overwrites, deletes, multi-key transactions and
// lease grants and revokes, and returns the revision after each step.
func workload(t *testing.T, cli *clientv3.Client, prefix string, steps int) []int64 {
	t.Helper()
	ctx := t.Context()
	var revs []int64
	var leases []clientv3.LeaseID
	for i := range steps {
		var rev int64
		switch i % 6 {
		case 0, 1: // new key, then overwrites of older ones
			resp, err := cli.Put(ctx, fmt.Sprintf("%s/k%03d", prefix, i%40), fmt.Sprintf("v%d", i))
			require.NoError(t, err)
			rev = resp.Header.Revision
		case 2: // a multi-key transaction
			resp, err := cli.Txn(ctx).Then(
				clientv3.OpPut(fmt.Sprintf("%s/t%03d/a", prefix, i), fmt.Sprintf("a%d", i)),
				clientv3.OpPut(fmt.Sprintf("%s/t%03d/b", prefix, i), fmt.Sprintf("b%d", i)),
				clientv3.OpDelete(fmt.Sprintf("%s/k%03d", prefix, (i+7)%40)),
			).Commit()
			require.NoError(t, err)
			rev = resp.Header.Revision
		case 3: // a lease with two keys
			l, err := cli.Grant(ctx, int64(60+i))
			require.NoError(t, err)
			leases = append(leases, l.ID)
			_, err = cli.Put(ctx, fmt.Sprintf("%s/lease%03d/x", prefix, i), "x", clientv3.WithLease(l.ID))
			require.NoError(t, err)
			resp, err := cli.Put(ctx, fmt.Sprintf("%s/lease%03d/y", prefix, i), "y", clientv3.WithLease(l.ID))
			require.NoError(t, err)
			rev = resp.Header.Revision
		case 4: // revoke every other lease
			if len(leases) > 1 && i%12 == 4 {
				resp, err := cli.Revoke(ctx, leases[0])
				require.NoError(t, err)
				leases = leases[1:]
				rev = resp.Header.Revision
				break
			}
			resp, err := cli.Delete(ctx, fmt.Sprintf("%s/k%03d", prefix, (i+3)%40))
			require.NoError(t, err)
			rev = resp.Header.Revision
		case 5: // a range delete
			resp, err := cli.Delete(ctx, fmt.Sprintf("%s/t%03d/", prefix, i-3), clientv3.WithPrefix())
			require.NoError(t, err)
			rev = resp.Header.Revision
		}
		revs = append(revs, rev)
	}
	return revs
}

// requireSameAt checks that the restored member serves exactly what the
// source served at rev, at revision rev, and holds the keys' leases.
func requireSameAt(t *testing.T, source, restored *clientv3.Client, rev int64) {
	t.Helper()
	want, err := source.Get(t.Context(), "", clientv3.WithPrefix(), clientv3.WithRev(rev))
	require.NoError(t, err)
	requireSame(t, want, restored, rev)
}

// requireSame checks that the restored member serves want, at revision rev.
func requireSame(t *testing.T, want *clientv3.GetResponse, restored *clientv3.Client, rev int64) {
	t.Helper()
	ctx := t.Context()
	got, err := restored.Get(ctx, "", clientv3.WithPrefix())
	require.NoError(t, err)
	require.Equal(t, rev, got.Header.Revision, "restored member's revision")
	require.Equal(t, len(want.Kvs), len(got.Kvs), "keys at revision %d", rev)
	for i, w := range want.Kvs {
		g := got.Kvs[i]
		require.Equal(t, string(w.Key), string(g.Key))
		require.Equal(t, string(w.Value), string(g.Value), "value of %s", w.Key)
		require.Equal(t, w.CreateRevision, g.CreateRevision, "create revision of %s", w.Key)
		require.Equal(t, w.ModRevision, g.ModRevision, "mod revision of %s", w.Key)
		require.Equal(t, w.Version, g.Version, "version of %s", w.Key)
		require.Equal(t, w.Lease, g.Lease, "lease of %s", w.Key)
		if g.Lease != 0 {
			ttl, err := restored.TimeToLive(ctx, clientv3.LeaseID(g.Lease))
			require.NoError(t, err)
			require.Positive(t, ttl.TTL, "restored member holds lease %x of %s", g.Lease, g.Key)
			require.Positive(t, ttl.GrantedTTL)
		}
	}
}

// restorePoint restores p from b into a new data directory, starts etcd on
// it and returns a client of it and the result.
func restorePoint(t *testing.T, b storage.Bucket, p restore.Point, ids ...age.Identity) (*clientv3.Client, *restore.PointResult, *etcdtest.Server) {
	t.Helper()
	plan, err := restore.FindPoint(t.Context(), []restore.Source{{Name: "minio", Catalog: b}}, p)
	require.NoError(t, err, "find %s", p)
	r := &restore.Restorer{Identities: ids}
	dataDir := filepath.Join(t.TempDir(), "restored.etcd")
	res, err := r.RestorePoint(t.Context(), plan, restore.Member{Name: "restored", DataDir: dataDir, PeerURLs: []string{"http://127.0.0.1:2380"}})
	require.NoError(t, err, "restore %s", p)
	require.Equal(t, dataDir, res.DataDir)
	srv := etcdtest.Start(t, etcdtest.WithDataDir(dataDir), etcdtest.WithName("restored"))
	return srv.Client(t), res, srv
}

// TestPointInTimeMinIO runs a follower on a real etcd into MinIO (zstd and
// age) while a workload of puts, overwrites, deletes, transactions and
// leases runs, with a second full backup in the middle; then restores
// several revisions and a time, starts etcd on each, and compares it with
// the source at that revision. A lease expires during the workload: the
// revision where its key exists restores it with its lease, later ones
// without.
func TestPointInTimeMinIO(t *testing.T) {
	ctx := t.Context()
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	for i := range 20 {
		_, err := cli.Put(ctx, fmt.Sprintf("/pre/k%02d", i), "before")
		require.NoError(t, err)
	}
	srv := miniotest.Start(t)
	bucket := newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{}))
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)

	rec := &followEvents{}
	stop := startFollower(t, cli, etcd.Endpoints(), bucket, "prod-a", rec, id.Recipient().String())
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	entries, err := backup.ListBackups(ctx, bucket, "prod-a")
	require.NoError(t, err)
	require.Len(t, entries, 1)
	fullRev := entries[0].Manifest.Etcd.Revision
	require.True(t, fullRev.Exact(), "no writes ran during the first full backup: %+v", fullRev)

	// A lease left to expire: etcd deletes its key during the workload.
	short, err := cli.Grant(ctx, 3)
	require.NoError(t, err)
	put, err := cli.Put(ctx, "/expiring/key", "x", clientv3.WithLease(short.ID))
	require.NoError(t, err)
	withShortLease := put.Header.Revision

	revs := workload(t, cli, "/w1", 60)
	var expired int64
	require.Eventually(t, func() bool {
		resp, err := cli.Get(ctx, "/expiring/key")
		if err != nil || len(resp.Kvs) > 0 {
			return false
		}
		expired = resp.Header.Revision
		return true
	}, 30*time.Second, 50*time.Millisecond, "the short lease expired")
	// A time target: the follower receives the revision of the expiry
	// well before the time, the next revision comes after it.
	waitCommitted(t, rec, expired)
	timeRev := expired
	time.Sleep(300 * time.Millisecond)
	atTime := time.Now()
	time.Sleep(300 * time.Millisecond)

	// A scheduled full backup in the middle of the chain.
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	second := runBackup(t, snapshotter, bucket, "prod-a", "full", backup.Zstd, id.Recipient().String())
	require.True(t, second.Etcd.Revision.Exact())
	revs2 := workload(t, cli, "/w2", 60)
	last := revs2[len(revs2)-1]
	waitCommitted(t, rec, last)
	require.NoError(t, stop())

	// The chain on the store: contiguous segments from the first full on.
	entries, err = backup.ListBackups(ctx, bucket, "prod-a")
	require.NoError(t, err)
	next := fullRev.Low + 1
	var inside int64
	for _, e := range entries {
		if e.Kind != backup.KindDelta {
			continue
		}
		m := e.Manifest
		require.Equal(t, next, m.FirstRevision, "segment %s follows the previous one", e.ID)
		require.True(t, m.Encrypted())
		if inside == 0 && m.LastRevision-m.FirstRevision >= 2 && m.FirstRevision > fullRev.Low+1 {
			inside = m.FirstRevision + 1
		}
		next = m.LastRevision + 1
	}
	require.Equal(t, last+1, next, "the segments reach the last revision")
	require.NotZero(t, inside, "a segment of three revisions or more")

	targets := []int64{fullRev.High, withShortLease, expired, inside, revs[len(revs)/2], second.Etcd.Revision.High, second.Etcd.Revision.High + 3, last}
	for _, rev := range targets {
		t.Run(fmt.Sprintf("revision-%d", rev), func(t *testing.T) {
			restored, res, srv := restorePoint(t, bucket, restore.Point{Cluster: "prod-a", Revision: rev}, id)
			defer srv.Stop()
			require.Equal(t, rev, res.Revision)
			requireSameAt(t, cli, restored, rev)
		})
	}
	t.Run("drill", func(t *testing.T) {
		plan, err := restore.FindPoint(ctx, []restore.Source{{Name: "minio", Catalog: bucket}}, restore.Point{Cluster: "prod-a", Revision: last})
		require.NoError(t, err)
		r := &restore.Restorer{Identities: []age.Identity{id}, TempDir: t.TempDir()}
		drill, err := r.DrillPoint(ctx, plan)
		require.NoError(t, err)
		require.True(t, drill.Passed())
		want, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(last), clientv3.WithCountOnly())
		require.NoError(t, err)
		require.Equal(t, last, drill.Status.Revision)
		require.EqualValues(t, want.Count, drill.Status.TotalKeys)
		require.Empty(t, dirEntries(t, r.TempDir), "the drill leaves nothing")
	})
	t.Run("time", func(t *testing.T) {
		restored, res, srv := restorePoint(t, bucket, restore.Point{Cluster: "prod-a", Time: atTime}, id)
		defer srv.Stop()
		require.Equal(t, timeRev, res.Revision)
		requireSameAt(t, cli, restored, timeRev)
	})
}
