package backup_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// lostPublish is a file bucket whose first delta manifest's staged
// publish lands but answers with an error, and whose reads of that
// manifest fail until the follower reports the failed attempt: a commit
// in doubt on the path that stores a segment in one call.
type lostPublish struct {
	*blob.Bucket
	mu   sync.Mutex
	key  string // the manifest whose answer is lost
	open atomic.Bool
	lost atomic.Int32
}

var errLostAnswer = errors.New("answer lost")

func (b *lostPublish) Stage(ctx context.Context, key string, r io.Reader, opts *storage.PutOptions) (storage.Staged, error) {
	s, err := b.Bucket.Stage(ctx, key, r, opts)
	return b.wrap(key, s, err)
}

func (b *lostPublish) PutThenStage(ctx context.Context, first, second storage.StagePut) (storage.Staged, error) {
	s, err := b.Bucket.PutThenStage(ctx, first, second)
	return b.wrap(second.Key, s, err)
}

// wrap makes the publish of the first delta manifest staged lose its
// answer.
func (b *lostPublish) wrap(key string, s storage.Staged, err error) (storage.Staged, error) {
	if err != nil || !strings.HasSuffix(key, backup.ManifestSuffix) || !strings.Contains(key, "-delta-") {
		return s, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.key != "" {
		return s, nil
	}
	b.key = key
	return lostStaged{s, b}, nil
}

type lostStaged struct {
	storage.Staged
	b *lostPublish
}

func (s lostStaged) Publish(ctx context.Context) error {
	if err := s.Staged.Publish(ctx); err != nil {
		return err
	}
	s.b.lost.Add(1)
	return errLostAnswer
}

func (b *lostPublish) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	b.mu.Lock()
	blind := key == b.key && !b.open.Load()
	b.mu.Unlock()
	if blind {
		return nil, errLostAnswer
	}
	return b.Bucket.Get(ctx, key)
}

func (b *lostPublish) ObserveFollow(e backup.FollowEvent) {
	if e.Kind == backup.SegmentFailed {
		b.open.Store(true)
	}
}

// TestFollowerStoreRetryFindsCommitInDoubt: on a file destination, which
// stores a segment in one call (backup.Storer), the manifest of a segment
// is named but its answer and the read-back are lost, so the attempt fails
// in doubt. The next attempt finds the manifest instead of storing the
// segment again: the chain holds each revision once.
func TestFollowerStoreRetryFindsCommitInDoubt(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	b, _ := newFile(t)
	lost := &lostPublish{Bucket: b}
	f, rec := doubtFollower(t, etcd, backup.Target{Destination: "file", Uploader: &backup.BucketUploader{Bucket: lost}}, b, lost)
	last := followThirtyPuts(t, cli, f, rec)
	require.Equal(t, int32(1), lost.lost.Load(), "one publish answered with a lost answer")
	require.True(t, lost.open.Load(), "an attempt failed in doubt")
	requireChainOnce(t, b, last)
}
