package blob_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	gcblob "gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"

	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/storagetest"
)

func TestConformanceMem(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storagetest.Fixture {
		b := blob.New(memblob.OpenBucket(nil), nil)
		return storagetest.Fixture{Bucket: b}
	})
}

func TestConformanceFile(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storagetest.Fixture {
		gb, err := fileblob.OpenBucket(t.TempDir(), nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = gb.Close() })
		return storagetest.Fixture{Bucket: blob.New(gb, nil)}
	})
}

// TestConformanceFileNextToObjects runs the suite on a file bucket opened
// by URL with temporary files next to the objects and no sidecars.
func TestConformanceFileNextToObjects(t *testing.T) {
	mux := new(gcblob.URLMux)
	mux.RegisterBucket(fileblob.Scheme, &fileblob.URLOpener{})
	storagetest.Run(t, func(t *testing.T) storagetest.Fixture {
		b, err := blob.Open(t.Context(), mux, "file://"+t.TempDir()+"?no_tmp_dir=1&metadata=skip", nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, b.Close()) })
		return storagetest.Fixture{Bucket: b, NoMetadata: true}
	})
}

// TestConformanceFileByURL runs the suite on file buckets opened by URL,
// whose directory the adapter knows, so that PutIfAbsent links atomically:
// one with the defaults and one behind gocloud's prefix parameter.
func TestConformanceFileByURL(t *testing.T) {
	mux := new(gcblob.URLMux)
	mux.RegisterBucket(fileblob.Scheme, &fileblob.URLOpener{})
	for _, query := range []string{"", "?prefix=seed-eu/"} {
		t.Run("query="+query, func(t *testing.T) {
			storagetest.Run(t, func(t *testing.T) storagetest.Fixture {
				b, err := blob.Open(t.Context(), mux, "file://"+t.TempDir()+query, nil)
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, b.Close()) })
				require.True(t, storage.CanPutIfAbsent(b))
				return storagetest.Fixture{Bucket: b}
			})
		})
	}
}
