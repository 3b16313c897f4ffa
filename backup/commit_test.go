package backup_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/storage"
)

// lostReplyBucket wraps a real bucket and fails the write of every manifest
// with fail. With land set, the manifest is written first (the reply was
// lost after the store wrote it); otherwise the write is held back and
// lands only when late is called (a request cut by its context that the
// store still completes).
type lostReplyBucket struct {
	storage.Bucket
	fail error
	land bool

	mu      sync.Mutex
	pending []func() error
}

func (b *lostReplyBucket) PutIfAbsent(ctx context.Context, key string, r io.Reader, opts *storage.PutOptions) error {
	if !strings.HasSuffix(key, backup.ManifestSuffix) {
		return storage.PutIfAbsent(ctx, b.Bucket, key, r, opts)
	}
	if !b.land {
		body, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		b.mu.Lock()
		b.pending = append(b.pending, func() error {
			return storage.PutIfAbsent(context.Background(), b.Bucket, key, strings.NewReader(string(body)), opts)
		})
		b.mu.Unlock()
		return b.fail
	}
	if err := storage.PutIfAbsent(ctx, b.Bucket, key, r, opts); err != nil {
		return err
	}
	return b.fail
}

// late lands the held-back manifest writes.
func (b *lostReplyBucket) late(t *testing.T) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, put := range b.pending {
		require.NoError(t, put())
	}
	b.pending = nil
}

// requireWholeBackups checks that every manifest in b names a data object
// that exists, with the size the manifest records, and returns how many
// manifests there are.
func requireWholeBackups(t *testing.T, b storage.Bucket) int {
	t.Helper()
	n := 0
	for _, key := range listKeys(t, b) {
		if !strings.HasSuffix(key, backup.ManifestSuffix) {
			continue
		}
		n++
		m, err := backup.ParseManifest(strings.NewReader(string(readObject(t, b, key))))
		require.NoError(t, err)
		info, err := b.Stat(t.Context(), backup.ClusterPrefix(m.Cluster)+m.DataKey)
		require.NoError(t, err, "manifest %s names a data object that exists", key)
		require.Equal(t, m.Stored.Size, info.Size)
	}
	return n
}

// TestCommitLostReply commits through a bucket that writes the manifest
// and then reports an error, as a store whose reply was lost does (its
// retry is refused with ErrExist) or as a context that ended after the
// write: the backup is committed, once, and Run reports success.
func TestCommitLostReply(t *testing.T) {
	etcd := etcdtest.Start(t)
	_, err := etcdtest.Fill(t.Context(), etcd.Client(t), etcdtest.FillOptions{Keys: 500, Seed: 5})
	require.NoError(t, err)
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)

	for _, fail := range []error{
		storage.Errorf("put", "manifest", storage.ErrExist, nil),
		context.DeadlineExceeded,
	} {
		t.Run(fail.Error(), func(t *testing.T) {
			direct, _ := newFile(t)
			b := &lostReplyBucket{Bucket: direct, fail: fail, land: true}
			p := &backup.Pipeline{Snapshotter: snapshotter}
			res, err := p.Run(t.Context(), backup.Request{Cluster: "c", Name: "n", Scheduled: true,
				Targets: []backup.Target{{Destination: "file", Uploader: &backup.BucketUploader{Bucket: b}}}})
			require.NoError(t, err)
			require.NotNil(t, res.Outcomes[0].Manifest)
			require.Len(t, listKeys(t, direct), 2, "one data object and its manifest")
			require.Equal(t, 1, requireWholeBackups(t, direct))
		})
	}
}

// TestCommitInDoubtKeepsData fails a manifest write with an error that
// leaves its outcome in doubt (the context ended with the request sent),
// and lands the write afterwards, as a store may: the data object must
// still be there, so the late manifest names a whole backup.
func TestCommitInDoubtKeepsData(t *testing.T) {
	etcd := etcdtest.Start(t)
	_, err := etcdtest.Fill(t.Context(), etcd.Client(t), etcdtest.FillOptions{Keys: 500, Seed: 6})
	require.NoError(t, err)
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	direct, _ := newFile(t)
	b := &lostReplyBucket{Bucket: direct, fail: context.Canceled}

	p := &backup.Pipeline{Snapshotter: snapshotter}
	_, err = p.Run(t.Context(), backup.Request{Cluster: "c", Name: "n", Scheduled: true,
		Targets: []backup.Target{{Destination: "file", Uploader: &backup.BucketUploader{Bucket: b}}}})
	require.Error(t, err)
	require.True(t, errors.Is(err, context.Canceled), "the cause is kept: %v", err)
	require.Len(t, listKeys(t, direct), 1, "the data object is kept")

	b.late(t)
	require.Equal(t, 1, requireWholeBackups(t, direct))

	// A store's refusal, after which nothing can land, still removes the
	// run's data object.
	refusing := &lostReplyBucket{Bucket: direct, fail: storage.Errorf("put", "manifest", storage.ErrPermission, nil)}
	_, err = p.Run(t.Context(), backup.Request{Cluster: "c", Name: "other", Scheduled: true,
		Targets: []backup.Target{{Destination: "file", Uploader: &backup.BucketUploader{Bucket: refusing}}}})
	require.ErrorIs(t, err, storage.ErrPermission)
	require.Len(t, listKeys(t, direct), 2, "the refused run's data object was removed")
}
