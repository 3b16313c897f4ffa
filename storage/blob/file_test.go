package blob

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/fileblob"
)

// TestEscapeFileKeyMatchesFileblob holds escapeFileKey to the place where
// fileblob itself writes an object, for keys that need no escaping and
// keys with text fileblob escapes.
func TestEscapeFileKeyMatchesFileblob(t *testing.T) {
	dir := t.TempDir()
	gb, err := fileblob.OpenBucket(dir, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = gb.Close() })
	b := &Bucket{fileDir: dir}
	for _, key := range []string{
		"plain", "a/b/c.db.zst", "__0x41__", "x__0x2f__y", "__0x__", "__0xzz__", "__0x7fffffffff__", "a/__0x7a__/b", "_0x41_", "__0x41_", "é/__0xé__",
		"c/v1../x", "a../b../c", "x/.../y",
	} {
		require.NoError(t, gb.WriteAll(t.Context(), key, []byte(key), nil), key)
		data, err := os.ReadFile(b.filePath(key))
		require.NoError(t, err, "key %q: fileblob wrote it elsewhere than %s", key, b.filePath(key))
		require.Equal(t, key, string(data))
	}
	require.Equal(t, filepath.Join(dir, "p", "k"), (&Bucket{fileDir: dir, filePrefix: "p/"}).filePath("k"))
}
