package backup_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
)

// memoryKeys is the number of keys the memory tests write: enough that
// memory held per key (archive/zip's writer held about 490 bytes) shows
// as tens of MiB.
const memoryKeys = 200_000

// memoryKey is the i-th key of the memory tests, Kubernetes-like.
func memoryKey(i int) backup.KeyValue {
	return backup.KeyValue{Key: fmt.Appendf(nil, "/registry/configmaps/namespace-%04d/config-map-%06d", i/200, i),
		Value: []byte("a small value"), CreateRevision: int64(i + 2), ModRevision: int64(i + 2), Version: 1}
}

// liveHeap returns the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// peakGrowth runs step(i) for i in [0, n) and returns the largest growth
// of the live heap over its value before the first step, sampled every
// n/20 steps and after the last.
func peakGrowth(t testing.TB, n int, step func(i int)) uint64 {
	t.Helper()
	base := liveHeap()
	var peak uint64
	sample := func() {
		if h := liveHeap(); h > base && h-base > peak {
			peak = h - base
		}
	}
	for i := range n {
		step(i)
		if i%(n/20) == 0 {
			sample()
		}
	}
	sample()
	return peak
}

// A keys zip writer holds no memory per key: it spools the index and the
// central directory. The heap it holds, at its largest just before Close,
// is its buffers, whatever the number of keys (archive/zip's writer held
// about 490 bytes a key: 95 MiB at 200,000 keys).
func TestKeysZipWriterMemoryIsFlat(t *testing.T) {
	h := backup.KeysJSONHeader{Format: backup.KeysJSONFormat, Version: backup.KeysJSONVersion, Revision: 100,
		Prefixes: []string{"/registry/"}, Created: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var zw, jw backup.KeyWriter
	var err error
	zipPeak := peakGrowth(t, memoryKeys, func(i int) {
		if i == 0 {
			zw, err = backup.NewKeysZipWriter(io.Discard, h)
			require.NoError(t, err)
		}
		require.NoError(t, zw.Write(memoryKey(i)))
	})
	require.NoError(t, zw.Close())
	jsonPeak := peakGrowth(t, memoryKeys, func(i int) {
		if i == 0 {
			jw, err = backup.NewKeysJSONWriter(io.Discard, h)
			require.NoError(t, err)
		}
		require.NoError(t, jw.Write(memoryKey(i)))
	})
	require.NoError(t, jw.Close())
	t.Logf("%d keys: a keys zip writer held %d KiB at its peak (%.1f bytes a key), a keys-json writer %d KiB",
		memoryKeys, zipPeak>>10, float64(zipPeak)/memoryKeys, jsonPeak>>10)
	require.Less(t, zipPeak, uint64(2<<20), "a keys zip writer's memory grows with the keys")
}

// A keys zip reader holds no memory per key either: it walks the central
// directory record by record beside the index (archive/zip's reader held
// every file's header: about 66 MiB at 200,000 keys).
func TestKeysZipReaderMemoryIsFlat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.zip")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	w, err := backup.NewKeysZipWriter(f, backup.KeysJSONHeader{Format: backup.KeysJSONFormat, Version: backup.KeysJSONVersion,
		Revision: memoryKeys + 2, Prefixes: []string{"/registry/"}, Created: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	require.NoError(t, err)
	for i := range memoryKeys {
		require.NoError(t, w.Write(memoryKey(i)))
	}
	require.NoError(t, w.Close())
	st, err := f.Stat()
	require.NoError(t, err)

	var r *backup.KeysZipReader
	peak := peakGrowth(t, memoryKeys+1, func(i int) {
		if i == 0 {
			r, err = backup.NewKeysZipReader(f, st.Size(), 0)
			require.NoError(t, err)
		}
		kv, err := r.Next()
		if i == memoryKeys {
			require.Equal(t, io.EOF, err)
			return
		}
		require.NoError(t, err)
		require.Equal(t, memoryKey(i), kv)
	})
	require.True(t, r.Complete())
	require.NoError(t, r.Close())
	t.Logf("%d keys: a keys zip reader held %d KiB at its peak (%.1f bytes a key)", memoryKeys, peak>>10, float64(peak)/memoryKeys)
	require.Less(t, peak, uint64(2<<20), "a keys zip reader's memory grows with the keys")
}
