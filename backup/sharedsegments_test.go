package backup_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
)

// flakySegments stores delta segments slowly, a few KiB at a time, and
// fails every third one after reading part of it, so that the follower
// stores it again; full backups pass at once.
type flakySegments struct {
	backup.Uploader
	uploads atomic.Int64
}

var errSegmentStoreBroke = errors.New("segment store broke")

func (u *flakySegments) Upload(ctx context.Context, m *backup.Manifest, r io.Reader) error {
	if !m.IsDelta() {
		return u.Uploader.Upload(ctx, m, r)
	}
	if u.uploads.Add(1)%3 == 0 {
		_, _ = io.CopyN(io.Discard, r, 100)
		return errSegmentStoreBroke
	}
	return u.Uploader.Upload(ctx, m, &yieldingReader{r: r})
}

// yieldingReader reads at most 512 bytes at a time and yields after each.
type yieldingReader struct{ r io.Reader }

func (y *yieldingReader) Read(p []byte) (int, error) {
	runtime.Gosched()
	return y.r.Read(p[:min(len(p), 512)])
}

// TestFollowersStoreSharedSegmentsToTwoFlakyDestinations: followers whose
// segments are encoded on the shared compressors and pooled buffers store
// each to two slow destinations that fail a third of the stores (stored
// again later, from the same encoded bytes). Every segment committed on
// each destination decodes to exactly the events etcd's history holds for
// its revisions: no buffer given back while a store still read it.
func TestFollowersStoreSharedSegmentsToTwoFlakyDestinations(t *testing.T) {
	ctx := t.Context()
	srv := etcdtest.Start(t)
	identity, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	buckets := make([]*blob.Bucket, 2)
	for i := range buckets {
		buckets[i], err = blob.Open(ctx, drivers.NewURLMux(nil), "mem://", nil)
		require.NoError(t, err)
		defer buckets[i].Close()
	}
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: srv.Endpoints()})
	require.NoError(t, err)

	compressions := []backup.Compression{backup.Zstd, backup.Gzip, backup.Zstd, backup.None}
	obs := make([]*committedUpTo, len(compressions))
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(compressions))
	for i, c := range compressions {
		p := &backup.Pipeline{Snapshotter: snapshotter, Compression: c}
		if i == 2 {
			p.Encryption = backup.Encryption{Recipients: []string{identity.Recipient().String()}}
		}
		obs[i] = &committedUpTo{}
		var targets []backup.Target
		var catalogs []backup.Catalog
		for d, b := range buckets {
			targets = append(targets, backup.Target{Destination: fmt.Sprintf("d%d", d), Uploader: &flakySegments{Uploader: &backup.BucketUploader{Bucket: b}}})
			catalogs = append(catalogs, b)
		}
		f := &backup.Follower{
			Client: srv.Client(t), Pipeline: p, Cluster: fmt.Sprintf("c%d", i), Targets: targets, Catalogs: catalogs,
			FlushInterval: 20 * time.Millisecond, MaxSegmentBytes: 2 << 10, RetryInterval: 10 * time.Millisecond,
			Observer: obs[i],
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs <- f.Run(fctx) }()
	}
	require.Eventually(t, func() bool {
		for _, o := range obs {
			if start, _ := o.get(); start == 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond)

	cli := srv.Client(t)
	var last int64
	for i := range 150 {
		resp, err := cli.Put(ctx, fmt.Sprintf("/k%02d", i%30), fmt.Sprintf("value %d %s", i, make([]byte, i*5)))
		require.NoError(t, err)
		last = resp.Header.Revision
	}
	require.Eventually(t, func() bool {
		for _, o := range obs {
			if _, c := o.get(); c < last {
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

	history := etcdHistory(t, cli, last)
	for i := range obs {
		for d, b := range buckets {
			segments := segmentsEvents(t, b, fmt.Sprintf("c%d", i), identity)
			require.Greater(t, len(segments), 10, "cluster c%d on destination d%d", i, d)
			for _, s := range segments {
				want := slices.DeleteFunc(slices.Clone(history), func(e sharedEvent) bool {
					return e.rev < s.m.FirstRevision || e.rev > s.m.LastRevision
				})
				require.Equal(t, want, s.events, "segment %s of c%d on destination d%d", s.m.ID, i, d)
			}
		}
	}
}

// storedSegment is a delta segment a catalog holds, decoded.
type storedSegment struct {
	m      *backup.Manifest
	events []sharedEvent
}

// segmentsEvents decodes every delta segment of cluster, of any chain,
// checking its digests.
func segmentsEvents(t *testing.T, b backup.Catalog, cluster string, identity age.Identity) []storedSegment {
	entries, err := backup.ListBackups(t.Context(), b, cluster)
	require.NoError(t, err)
	var out []storedSegment
	for _, e := range entries {
		if e.Kind != backup.KindDelta {
			continue
		}
		out = append(out, storedSegment{m: e.Manifest, events: segmentEvents(t, b, e, identity)})
	}
	return out
}
