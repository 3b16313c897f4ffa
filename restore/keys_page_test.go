package restore

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// TestEtcdKeysPagesByBytes: the keys of a live etcd (an import's merge, a
// diff) are read in pages of about 4 MiB, not of 1,000 keys whatever
// their size: 200 values of 100 KiB come in a first page of 64 keys, then
// pages of at most 41, every key once and in order.
func TestEtcdKeysPagesByBytes(t *testing.T) {
	c := etcdtest.Start(t).Client(t)
	value := strings.Repeat("v", 100<<10)
	for i := range 200 {
		_, err := c.Put(t.Context(), fmt.Sprintf("/big/%03d", i), value)
		require.NoError(t, err)
	}
	s := NewEtcdKeys(c, []string{"/big/"})
	var pages []int
	read := 0
	for {
		if len(s.page) == 0 && s.i < len(s.ranges) {
			require.NoError(t, s.fetch(context.Background()))
			pages = append(pages, len(s.page))
		}
		kv, err := s.Next(t.Context())
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("/big/%03d", read), string(kv.Key))
		read++
	}
	require.Equal(t, 200, read)
	require.NotEmpty(t, pages)
	assert.Equal(t, 64, pages[0], "the first page: %v", pages)
	for _, n := range pages[1:] {
		assert.LessOrEqual(t, n, 41, "a page of 100 KiB values: %v", pages)
	}
}
