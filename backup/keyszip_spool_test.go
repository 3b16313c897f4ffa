package backup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fullWriter fails every write as a full file system does.
type fullWriter struct{}

func (fullWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// A temporary folder that fills up fails the export with an error that
// names it, whether the index's spool (behind its compressor) or the
// directory's fills first.
func TestKeysZipFullTempDir(t *testing.T) {
	for _, which := range []string{"index", "directory"} {
		z, err := NewKeysZipWriter(io.Discard, KeysJSONHeader{Format: KeysJSONFormat, Version: KeysJSONVersion, Revision: 1,
			Prefixes: []string{"/"}, Created: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
		require.NoError(t, err)
		s := z.dir
		if which == "index" {
			s = z.index
		}
		s.w = bufio.NewWriterSize(fullWriter{}, 16)
		for i := 0; err == nil && i < 100_000; i++ {
			err = z.Write(KeyValue{Key: fmt.Appendf(nil, "/k/%09d", i), Value: []byte("v"), CreateRevision: 2, ModRevision: 2, Version: 1})
		}
		if err == nil {
			err = z.Close()
		}
		require.True(t, errors.Is(err, syscall.ENOSPC), "%s: %v", which, err)
		require.ErrorContains(t, err, "$TMPDIR", which)
		z.Discard()
	}
}
