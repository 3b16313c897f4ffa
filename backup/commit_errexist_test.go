package backup_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/storage"
)

// staleReadBucket: the manifest write lands, its reply is lost and the
// retry gets 412 (ErrExist); the read-back right after is served by a
// replica/cache that has not seen the write yet (NotFound).
type staleReadBucket struct {
	*lostReplyBucket
	staleReads int
}

func (b *staleReadBucket) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if strings.HasSuffix(key, backup.ManifestSuffix) && b.staleReads > 0 {
		b.staleReads--
		return nil, storage.Errorf("get", key, storage.ErrNotFound, nil)
	}
	return b.lostReplyBucket.Get(ctx, key)
}

// TestCommitErrExistThenNotFoundKeepsData: a manifest write answered with
// ErrExist whose read-back says NotFound is in doubt: the data object is kept,
// so a manifest that did land still names a whole backup.
func TestCommitErrExistThenNotFoundKeepsData(t *testing.T) {
	etcd := etcdtest.Start(t)
	_, err := etcdtest.Fill(t.Context(), etcd.Client(t), etcdtest.FillOptions{Keys: 50, Seed: 5})
	require.NoError(t, err)
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	direct, _ := newFile(t)
	b := &staleReadBucket{lostReplyBucket: &lostReplyBucket{Bucket: direct, fail: storage.Errorf("put", "manifest", storage.ErrExist, nil), land: true}, staleReads: 1}
	p := &backup.Pipeline{Snapshotter: snapshotter}
	_, err = p.Run(t.Context(), backup.Request{Cluster: "c", Name: "n", Scheduled: true,
		Targets: []backup.Target{{Destination: "file", Uploader: &backup.BucketUploader{Bucket: b}}}})
	t.Logf("run error: %v; keys: %v", err, listKeys(t, direct))
	requireWholeBackups(t, direct)
}
