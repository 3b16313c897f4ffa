package doccheck

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestModuleIsDocumented holds every exported identifier of the module to
// a doc comment.
func TestModuleIsDocumented(t *testing.T) {
	missing, err := Undocumented(filepath.Join("..", ".."))
	require.NoError(t, err)
	require.Empty(t, missing, "exported identifiers without a doc comment")
}

func TestUndocumentedFindsGaps(t *testing.T) {
	dir := t.TempDir()
	src := `package p

// Documented is fine.
func Documented() {}

func Bare() {}

type T struct{}

func (T) M() {}

type hidden struct{}

func (hidden) M() {}

const C = 1
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o600))
	missing, err := Undocumented(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"p.go:6: func Bare", "p.go:8: type T", "p.go:10: func M", "p.go:16: value C"}, missing)
}
