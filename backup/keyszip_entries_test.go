package backup_test

import (
	"archive/zip"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
)

// A zip of many empty entries is refused from its end record, before its
// directory is loaded: the memory spent does not grow with the entries.
func TestKeysZipRefusesTooManyEntriesBeforeLoadingThem(t *testing.T) {
	const n = 200_000
	path := filepath.Join(t.TempDir(), "many.zip")
	f, err := os.Create(path)
	require.NoError(t, err)
	zw := zip.NewWriter(f)
	for range n {
		_, err := zw.CreateRaw(&zip.FileHeader{Name: "keys/k", Method: zip.Store})
		require.NoError(t, err)
	}
	require.NoError(t, zw.Close())
	require.NoError(t, f.Close())
	rf, err := os.Open(path)
	require.NoError(t, err)
	defer rf.Close()
	st, err := rf.Stat()
	require.NoError(t, err)

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = backup.NewKeysZipReader(rf, st.Size(), 1<<20)
	runtime.ReadMemStats(&after)
	require.ErrorContains(t, err, "200000 files, more than")
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d bytes allocated to refuse a zip of %d entries", allocated, n)
	require.Less(t, allocated, uint64(1<<20))
}
