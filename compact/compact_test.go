package compact_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/compact"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/faultproxy"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// committedRev records the last revision a follower committed.
type committedRev struct {
	mu      sync.Mutex
	rev     int64
	started bool
}

func (c *committedRev) ObserveFollow(e backup.FollowEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch e.Kind {
	case backup.SegmentCommitted:
		c.rev = max(c.rev, e.Committed)
	case backup.ChainStarted:
		c.started = true
	}
}

func (c *committedRev) get() (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rev, c.started
}

// chain is a followed etcd, its chain in MinIO and the follower's state.
type chain struct {
	cli    *clientv3.Client
	bucket *s3.Bucket
	srv    *miniotest.Server
	id     *age.X25519Identity
	rec    *committedRev
	stop   func() error
}

// startChain starts etcd with a few keys, MinIO, and a follower of the
// etcd into a bucket (zstd, age), and waits for its chain to start.
func startChain(t *testing.T) *chain {
	t.Helper()
	etcd := etcdtest.Start(t)
	c := &chain{cli: etcd.Client(t), srv: miniotest.Start(t), rec: &committedRev{}}
	for i := range 10 {
		_, err := c.cli.Put(t.Context(), fmt.Sprintf("/pre/k%02d", i), "before")
		require.NoError(t, err)
	}
	c.bucket = newS3(t, c.srv, c.srv.NewBucket(t, miniotest.BucketOptions{}))
	var err error
	c.id, err = age.GenerateX25519Identity()
	require.NoError(t, err)
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	f := &backup.Follower{
		Client:        c.cli,
		Pipeline:      c.pipeline(snapshotter),
		Cluster:       "prod-a",
		Targets:       []backup.Target{{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: c.bucket}}},
		Catalogs:      []backup.Catalog{c.bucket},
		FlushInterval: 200 * time.Millisecond,
		RetryInterval: 100 * time.Millisecond,
		Observer:      c.rec,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	c.stop = func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return fmt.Errorf("follower did not stop")
		}
	}
	t.Cleanup(func() { _ = c.stop() })
	require.Eventually(t, func() bool { _, ok := c.rec.get(); return ok }, 30*time.Second, 10*time.Millisecond, "chain started")
	return c
}

func (c *chain) pipeline(s backup.Snapshotter) *backup.Pipeline {
	return &backup.Pipeline{Snapshotter: s, Compression: backup.Zstd, Encryption: backup.Encryption{Recipients: []string{c.id.Recipient().String()}}}
}

func (c *chain) waitCommitted(t *testing.T, rev int64) {
	t.Helper()
	require.Eventually(t, func() bool { r, _ := c.rec.get(); return r >= rev }, 30*time.Second, 20*time.Millisecond,
		"follower did not commit revision %d", rev)
}

func (c *chain) sources() []restore.Source {
	return []restore.Source{{Name: "minio", Catalog: c.bucket}}
}

func (c *chain) compactor(t *testing.T) *compact.Compactor {
	return &compact.Compactor{
		Restorer: &restore.Restorer{Identities: []age.Identity{c.id}, TempDir: t.TempDir()},
		Pipeline: c.pipeline(nil),
	}
}

func (c *chain) targets(b storage.Bucket) []compact.Target {
	return []compact.Target{{Target: backup.Target{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: b}}, Catalog: b}}
}

func newS3(t *testing.T, srv *miniotest.Server, bucket string) *s3.Bucket {
	t.Helper()
	opts := srv.S3Options(bucket)
	opts.PartSize, opts.PartsInFlight = 5<<20, 2
	b, err := s3.New(opts)
	require.NoError(t, err)
	return b
}

// workload writes puts, overwrites, deletes, transactions and leased keys,
// and returns the revision after each step.
func workload(t *testing.T, cli *clientv3.Client, prefix string, steps int) []int64 {
	t.Helper()
	ctx := t.Context()
	var revs []int64
	for i := range steps {
		var rev int64
		switch i % 4 {
		case 0, 1:
			r, err := cli.Put(ctx, fmt.Sprintf("%s/k%02d", prefix, i%10), fmt.Sprintf("v%d", i))
			require.NoError(t, err)
			rev = r.Header.Revision
		case 2:
			r, err := cli.Txn(ctx).Then(
				clientv3.OpPut(fmt.Sprintf("%s/t%02d", prefix, i), "t"),
				clientv3.OpDelete(fmt.Sprintf("%s/k%02d", prefix, (i+3)%10)),
			).Commit()
			require.NoError(t, err)
			rev = r.Header.Revision
		case 3:
			l, err := cli.Grant(ctx, int64(600+i))
			require.NoError(t, err)
			r, err := cli.Put(ctx, fmt.Sprintf("%s/lease%02d", prefix, i), "l", clientv3.WithLease(l.ID))
			require.NoError(t, err)
			rev = r.Header.Revision
		}
		revs = append(revs, rev)
	}
	return revs
}

// requireRestoresAt restores rev from the bucket, starts etcd on it and
// compares every key with the source's at rev, leases included. It
// returns the full backup the plan started from.
func requireRestoresAt(t *testing.T, c *chain, rev int64) string {
	t.Helper()
	return requireRestoresFrom(t, c, c.sources(), rev)
}

// requireRestoresFrom is requireRestoresAt from other sources than the
// chain's bucket.
func requireRestoresFrom(t *testing.T, c *chain, sources []restore.Source, rev int64) string {
	t.Helper()
	ctx := t.Context()
	plan, err := restore.FindPoint(ctx, sources, restore.Point{Cluster: "prod-a", Revision: rev})
	require.NoError(t, err, "find revision %d", rev)
	r := &restore.Restorer{Identities: []age.Identity{c.id}}
	dataDir := filepath.Join(t.TempDir(), "restored.etcd")
	_, err = r.RestorePoint(ctx, plan, restore.Member{Name: "restored", DataDir: dataDir, PeerURLs: []string{"http://127.0.0.1:2380"}})
	require.NoError(t, err, "restore revision %d", rev)
	srv := etcdtest.Start(t, etcdtest.WithDataDir(dataDir), etcdtest.WithName("restored"))
	restored := srv.Client(t)
	want, err := c.cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(rev))
	require.NoError(t, err)
	got, err := restored.Get(ctx, "", clientv3.WithPrefix())
	require.NoError(t, err)
	require.Equal(t, rev, got.Header.Revision, "restored revision")
	require.Equal(t, len(want.Kvs), len(got.Kvs), "keys at revision %d", rev)
	for i, w := range want.Kvs {
		g := got.Kvs[i]
		require.Equal(t, string(w.Key), string(g.Key))
		require.Equal(t, string(w.Value), string(g.Value), "value of %s at %d", w.Key, rev)
		require.Equal(t, [3]int64{w.CreateRevision, w.ModRevision, w.Version}, [3]int64{g.CreateRevision, g.ModRevision, g.Version}, "revisions of %s", w.Key)
		require.Equal(t, w.Lease, g.Lease, "lease of %s", w.Key)
		if g.Lease != 0 {
			ttl, err := restored.TimeToLive(ctx, clientv3.LeaseID(g.Lease))
			require.NoError(t, err)
			require.Positive(t, ttl.TTL, "restored member holds lease %x of %s", g.Lease, g.Key)
		}
	}
	srv.Stop()
	return plan.Full.ID
}

// TestCompactRestoresEveryPoint compacts a chain followed from a real etcd
// into MinIO (zstd, age) while the follower keeps running, writes more,
// and restores revisions before, at and after the synthetic full backup:
// each is exactly the source's at that revision, leases included, and
// those at and after it are restored from the synthetic full backup and
// the chain's segments after it.
func TestCompactRestoresEveryPoint(t *testing.T) {
	ctx := t.Context()
	c := startChain(t)
	revs1 := workload(t, c.cli, "/w1", 40)
	at := revs1[len(revs1)-1]
	c.waitCommitted(t, at)

	res, err := c.compactor(t).Compact(ctx, compact.Request{Cluster: "prod-a", Sources: c.sources(), Targets: c.targets(c.bucket)})
	require.NoError(t, err)
	require.Equal(t, at, res.Revision, "the chain's last committed revision")
	require.Positive(t, res.Synthetic.Segments)

	revs2 := workload(t, c.cli, "/w2", 40)
	c.waitCommitted(t, revs2[len(revs2)-1])
	require.NoError(t, c.stop())

	entries, err := backup.ListBackups(ctx, c.bucket, "prod-a")
	require.NoError(t, err)
	var synthetic *backup.Manifest
	for _, e := range entries {
		if e.Kind == backup.KindBackup && e.Manifest.IsSynthetic() {
			require.Nil(t, synthetic, "one synthetic full backup")
			synthetic = e.Manifest
			require.True(t, e.ChainBase())
		}
	}
	require.NotNil(t, synthetic)
	require.Equal(t, res.ID, synthetic.ID)
	require.Equal(t, backup.RevisionInfo{Low: at, High: at}, synthetic.Etcd.Revision)
	require.Equal(t, backup.Zstd, synthetic.Compression)
	require.NotNil(t, synthetic.Encryption)
	require.Equal(t, at, synthetic.Synthetic.Revision)

	for _, rev := range []int64{revs1[3], revs1[25], at, revs2[0], revs2[17], revs2[len(revs2)-1]} {
		full := requireRestoresAt(t, c, rev)
		if rev >= at {
			require.Equal(t, synthetic.ID, full, "revision %d restores from the synthetic full backup", rev)
		} else {
			require.NotEqual(t, synthetic.ID, full, "revision %d", rev)
		}
	}
}

// TestCompactFailureLeavesNothingVisible: a compaction whose upload breaks
// midway, and one whose drill fails (the new backup is encrypted to a
// recipient the restorer has no identity of), leave no backup visible and
// the chain restorable as before; the failed drill's data object is gone.
func TestCompactFailureLeavesNothingVisible(t *testing.T) {
	ctx := t.Context()
	c := startChain(t)
	revs := workload(t, c.cli, "/w1", 20)
	last := revs[len(revs)-1]
	c.waitCommitted(t, last)
	require.NoError(t, c.stop())
	before := listKeys(t, c.bucket)

	isSyntheticData := func(r *http.Request) bool {
		return faultproxy.IsObjectCreation(r) && strings.Contains(r.URL.Path, "compacted") && !strings.Contains(r.URL.Path, backup.ManifestSuffix)
	}
	for _, rule := range []faultproxy.Rule{
		{Name: "reset", Match: isSyntheticData, Action: faultproxy.ResetAfter, Bytes: 100},
		{Name: "error", Match: isSyntheticData, Action: faultproxy.InternalError},
	} {
		proxy := faultproxy.StartHTTP(t, c.srv.Endpoint(), rule)
		opts := c.srv.S3Options(c.bucket.Name())
		opts.Endpoint = proxy.Addr()
		faulty, err := s3.New(opts)
		require.NoError(t, err)
		_, err = c.compactor(t).Compact(ctx, compact.Request{Cluster: "prod-a", Name: "compacted", Sources: c.sources(), Targets: c.targets(faulty)})
		require.Error(t, err, rule.Name)
		require.Positive(t, proxy.Fired()[rule.Name])
		require.Equal(t, before, listKeys(t, c.bucket), "%s: nothing visible", rule.Name)
	}

	other, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	cp := c.compactor(t)
	cp.Pipeline.Encryption.Recipients = []string{other.Recipient().String()}
	_, err = cp.Compact(ctx, compact.Request{Cluster: "prod-a", Name: "compacted", Sources: c.sources(), Targets: c.targets(c.bucket)})
	require.ErrorIs(t, err, compact.ErrDrill)
	require.ErrorIs(t, err, restore.ErrDecrypt)
	require.Equal(t, before, listKeys(t, c.bucket), "a failed drill leaves nothing, not even the data object")

	requireRestoresAt(t, c, last)
	requireRestoresAt(t, c, revs[5])
}

func listKeys(t *testing.T, b storage.Bucket) []string {
	t.Helper()
	var keys []string
	for info, err := range b.List(t.Context(), "prod-a/") {
		require.NoError(t, err)
		keys = append(keys, info.Key)
	}
	return keys
}
