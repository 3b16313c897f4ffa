package restore

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// readPages reads s to its end, recording each page's keys.
func readPages(t *testing.T, s *EtcdKeys) (keys []string, pages []int) {
	t.Helper()
	for {
		if len(s.page) == 0 && s.i < len(s.ranges) {
			require.NoError(t, s.fetch(context.Background()))
			pages = append(pages, len(s.page))
			continue
		}
		kv, err := s.Next(t.Context())
		if err == io.EOF {
			return keys, pages
		}
		require.NoError(t, err)
		keys = append(keys, string(kv.Key))
	}
}

// putKeys puts n keys under prefix with values of size bytes.
func putKeys(t *testing.T, c *clientv3.Client, prefix string, n, size int) {
	t.Helper()
	v := strings.Repeat("v", size)
	for i := range n {
		_, err := c.Put(t.Context(), fmt.Sprintf("%s%03d", prefix, i), v)
		require.NoError(t, err)
	}
}

// TestEtcdKeysPagesByBytes: the keys of a live etcd (an import's merge, a
// diff) are read in pages of about 4 MiB, not of 1,000 keys whatever
// their size: 200 values of 100 KiB, after an empty prefix, come in a
// first page of 64 keys, then pages of at most 41, every key once and in
// order; small keys still come 1,000 a page.
func TestEtcdKeysPagesByBytes(t *testing.T) {
	c := etcdtest.Start(t).Client(t)
	putKeys(t, c, "/big/", 200, 100<<10)
	putKeys(t, c, "/small/", 2500, 50)
	for _, prefixes := range [][]string{{"/big/"}, {"/a-empty/", "/big/"}} {
		keys, pages := readPages(t, NewEtcdKeys(c, prefixes))
		require.Len(t, keys, 200)
		for i, k := range keys {
			require.Equal(t, fmt.Sprintf("/big/%03d", i), k)
		}
		if prefixes[0] == "/a-empty/" {
			require.Equal(t, 0, pages[0])
			pages = pages[1:]
		}
		assert.Equal(t, 64, pages[0], "the first page: %v", pages)
		for _, n := range pages[1:] {
			assert.LessOrEqual(t, n, 41, "a page of 100 KiB values: %v", pages)
		}
	}
	keys, pages := readPages(t, NewEtcdKeys(c, []string{"/small/"}))
	require.Len(t, keys, 2500)
	assert.Equal(t, []int{64, 1000, 1000, 436}, pages, "pages of small keys")
}
