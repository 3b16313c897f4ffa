package backup_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
)

// committedUpTo records how far a follower committed.
type committedUpTo struct {
	mu        sync.Mutex
	start     int64 // the chain's first revision
	committed int64
}

func (c *committedUpTo) ObserveFollow(e backup.FollowEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch e.Kind {
	case backup.ChainStarted:
		c.start = e.Revision
	case backup.SegmentCommitted:
		c.committed = max(c.committed, e.Committed)
	}
}

func (c *committedUpTo) get() (start, committed int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.start, c.committed
}

// sharedEvent is one event as a segment holds it.
type sharedEvent struct {
	rev          int64
	key, value   string
	delete       bool
	create, vers int64
}

// TestFollowersShareCompressors: many followers of two clusters run at
// once, so that their segments are compressed concurrently on the shared
// zstd encoder, on reused gzip compressors and under age encryption, and
// their full backups on reused streaming compressors. Every segment then
// decodes, with its digests, to exactly the events etcd's history holds
// for its revisions, and each chain covers every revision from its start:
// no compressor mixed two streams.
func TestFollowersShareCompressors(t *testing.T) {
	ctx := t.Context()
	servers := []*etcdtest.Server{etcdtest.Start(t, etcdtest.WithName("a")), etcdtest.Start(t, etcdtest.WithName("b"))}
	identity, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	b, err := blob.Open(ctx, drivers.NewURLMux(nil), "mem://", nil)
	require.NoError(t, err)
	defer b.Close()

	const followers = 9
	type run struct {
		cluster  string
		server   int
		pipeline *backup.Pipeline
		obs      *committedUpTo
	}
	runs := make([]run, followers)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, followers)
	for i := range runs {
		srv := servers[i%len(servers)]
		snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: srv.Endpoints()})
		require.NoError(t, err)
		p := &backup.Pipeline{Snapshotter: snapshotter, Compression: []backup.Compression{backup.Zstd, backup.Gzip, backup.Zstd}[i%3]}
		if i%3 == 2 {
			p.Encryption = backup.Encryption{Recipients: []string{identity.Recipient().String()}}
		}
		runs[i] = run{cluster: fmt.Sprintf("c%02d", i), server: i % len(servers), pipeline: p, obs: &committedUpTo{}}
		f := &backup.Follower{
			Client:          srv.Client(t),
			Pipeline:        p,
			Cluster:         runs[i].cluster,
			Targets:         []backup.Target{{Destination: "mem", Uploader: &backup.BucketUploader{Bucket: b}}},
			Catalogs:        []backup.Catalog{b},
			FlushInterval:   20 * time.Millisecond,
			MaxSegmentBytes: 4 << 10,
			Observer:        runs[i].obs,
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs <- f.Run(fctx) }()
	}
	require.Eventually(t, func() bool {
		for _, r := range runs {
			if start, _ := r.obs.get(); start == 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond)

	// Writes of each cluster's own: values of varied sizes, overwrites,
	// deletes and transactions of several events.
	last := make([]int64, len(servers))
	var ww sync.WaitGroup
	for s, srv := range servers {
		cli := srv.Client(t)
		ww.Add(1)
		go func() {
			defer ww.Done()
			for i := range 200 {
				key := fmt.Sprintf("/%s/k%02d", srv.Name(), i%40)
				var resp *clientv3.TxnResponse
				var err error
				switch i % 7 {
				case 3:
					resp, err = cli.Txn(ctx).Then(clientv3.OpDelete(key)).Commit()
				case 5:
					resp, err = cli.Txn(ctx).Then(clientv3.OpPut(key, "a"), clientv3.OpPut(key+"x", string(bytes.Repeat([]byte{byte(i)}, i*7)))).Commit()
				default:
					resp, err = cli.Txn(ctx).Then(clientv3.OpPut(key, fmt.Sprintf("%s value %d %x", srv.Name(), i, sha256.Sum256([]byte{byte(i)})))).Commit()
				}
				if !assertNoError(t, err) {
					return
				}
				last[s] = resp.Header.Revision
			}
		}()
	}
	ww.Wait()
	require.Eventually(t, func() bool {
		for _, r := range runs {
			if _, c := r.obs.get(); c < last[r.server] {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond)
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	history := make([][]sharedEvent, len(servers))
	for s, srv := range servers {
		history[s] = etcdHistory(t, srv.Client(t), last[s])
	}
	for _, r := range runs {
		start, _ := r.obs.get()
		got := chainEvents(t, b, r.cluster, identity)
		want := slices.DeleteFunc(slices.Clone(history[r.server]), func(e sharedEvent) bool { return e.rev < start })
		require.NotEmpty(t, want)
		require.Equal(t, want, got, "cluster %s", r.cluster)
	}
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// etcdHistory returns every event of etcd from revision 2 to last.
func etcdHistory(t *testing.T, cli *clientv3.Client, last int64) []sharedEvent {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out []sharedEvent
	for wr := range cli.Watch(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(2)) {
		require.NoError(t, wr.Err())
		for _, e := range wr.Events {
			out = append(out, sharedEvent{rev: e.Kv.ModRevision, key: string(e.Kv.Key), value: string(e.Kv.Value),
				delete: e.Type == clientv3.EventTypeDelete, create: e.Kv.CreateRevision, vers: e.Kv.Version})
		}
		if len(out) > 0 && out[len(out)-1].rev >= last {
			return out
		}
	}
	t.Fatal("watch ended before the last revision")
	return nil
}

// chainEvents decodes every segment of cluster, in order, checking each
// segment's digests and that the segments follow each other.
func chainEvents(t *testing.T, b backup.Catalog, cluster string, identity age.Identity) []sharedEvent {
	entries, err := backup.ListBackups(t.Context(), b, cluster)
	require.NoError(t, err)
	entries = slices.DeleteFunc(entries, func(e backup.Entry) bool { return e.Kind != backup.KindDelta })
	slices.SortFunc(entries, func(a, b backup.Entry) int { return int(a.Manifest.FirstRevision - b.Manifest.FirstRevision) })
	require.Greater(t, len(entries), 3, "several segments (size cuts alone give about nine)")
	var out []sharedEvent
	next := entries[0].Manifest.FirstRevision
	for _, e := range entries {
		m := e.Manifest
		require.Equal(t, next, m.FirstRevision, "segment %s follows the one before", e.ID)
		next = m.LastRevision + 1
		out = append(out, segmentEvents(t, b, e, identity)...)
	}
	return out
}

// segmentEvents decodes the delta segment e of b, checking its digests.
func segmentEvents(t *testing.T, b backup.Catalog, e backup.Entry, identity age.Identity) []sharedEvent {
	m := e.Manifest
	rc, err := b.Get(t.Context(), e.Key)
	require.NoError(t, err)
	stored, err := io.ReadAll(rc)
	require.NoError(t, rc.Close())
	require.NoError(t, err)
	sum := sha256.Sum256(stored)
	require.Equal(t, m.Stored.SHA256, hex.EncodeToString(sum[:]), "stored digest of %s", e.ID)
	var ids []age.Identity
	if m.Encryption != nil {
		ids = []age.Identity{identity}
	}
	dec, err := backup.NewDecoder(bytes.NewReader(stored), m.Compression, ids...)
	require.NoError(t, err)
	raw, err := io.ReadAll(dec)
	require.NoError(t, err, "segment %s decodes", e.ID)
	require.NoError(t, dec.Close())
	sum = sha256.Sum256(raw)
	require.Equal(t, m.Raw.SHA256, hex.EncodeToString(sum[:]), "raw digest of %s", e.ID)
	var out []sharedEvent
	_, err = backup.DecodeSegment(bytes.NewReader(raw), func(r *backup.SegmentRevision) error {
		for _, ev := range r.Events {
			out = append(out, sharedEvent{rev: ev.ModRevision, key: string(ev.Key), value: string(ev.Value),
				delete: ev.Delete, create: ev.CreateRevision, vers: ev.Version})
		}
		return nil
	})
	require.NoError(t, err)
	return out
}
