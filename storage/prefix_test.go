package storage_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/storage"
)

// pairBucket records the keys of its PutThenStage and fails for fail.
type pairBucket struct {
	storage.Bucket
	keys []string
	fail string
}

func (b *pairBucket) PutThenStage(_ context.Context, first, second storage.StagePut) (storage.Staged, error) {
	b.keys = append(b.keys, first.Key, second.Key)
	if b.fail != "" {
		return nil, storage.Errorf("put", b.fail, storage.ErrExist, nil)
	}
	return nil, nil
}

// TestPrefixedPutThenStage: Prefixed forwards PutThenStage with both keys
// under its prefix and reports an error's key relative to it; over a
// bucket without it, it fails with ErrUnsupported.
func TestPrefixedPutThenStage(t *testing.T) {
	inner := &pairBucket{}
	p, err := storage.WithPrefix(inner, "seed/")
	require.NoError(t, err)
	first, second := storage.StagePut{Key: "c/seg"}, storage.StagePut{Key: "c/seg.json"}
	_, err = p.PutThenStage(t.Context(), first, second)
	require.NoError(t, err)
	assert.Equal(t, []string{"seed/c/seg", "seed/c/seg.json"}, inner.keys)

	inner.fail = "seed/c/seg.json"
	_, err = p.PutThenStage(t.Context(), first, second)
	var se *storage.Error
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "c/seg.json", se.Key)
	require.ErrorIs(t, err, storage.ErrExist)

	plain, err := storage.WithPrefix(struct{ storage.Bucket }{}, "seed/")
	require.NoError(t, err)
	_, err = plain.PutThenStage(t.Context(), first, second)
	require.True(t, errors.Is(err, storage.ErrUnsupported), "%v", err)
}
