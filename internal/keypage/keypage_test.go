package keypage

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPagerLimit: a page aims at the target bytes at the mean key size
// seen so far, between one key and the most keys a page may hold.
func TestPagerLimit(t *testing.T) {
	p := &Pager{MaxKeys: 1000, Target: 4 << 20}
	require.Equal(t, int64(1000), p.Limit(), "nothing seen yet")
	p.keys, p.bytes = 100, 100*16<<10 // 16 KiB a key
	require.Equal(t, int64(256), p.Limit())
	p.keys, p.bytes = 100, 100*100 // small keys: the most keys a page may hold
	require.Equal(t, int64(1000), p.Limit())
	p.keys, p.bytes = 1, 64<<20 // one huge value
	require.Equal(t, int64(1), p.Limit())
}
