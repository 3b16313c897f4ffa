package backup

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSegmentCodecLevel: a follower's segments are written at the
// pipeline's zstd level, record it apart from the algorithm, and decode
// with the manifest's Compression alone; segments of different levels
// differ in size.
func TestSegmentCodecLevel(t *testing.T) {
	raw := []byte(strings.Repeat(`{"kind":"Pod","metadata":{"name":"web-`, 1) + strings.Repeat(`abcdefgh","labels":{"app":"web"}},"spec":{"containers":[{"image":"nginx:1.27"}]}}`, 2000))
	sizes := map[string]int{}
	for _, c := range []Compression{ZstdFastest, ZstdBetter, Gzip} {
		codec, err := newSegmentCodec("prod-a", &Pipeline{Compression: c})
		require.NoError(t, err)
		seg, err := codec.encode(raw, SegmentSummary{FirstRevision: 5, LastRevision: 9}, "chain", 0)
		require.NoError(t, err)
		require.Equal(t, c.Algorithm(), seg.base.Compression)
		require.Equal(t, c.Level(), seg.base.CompressionLevel)
		dec, err := NewDecoder(bytes.NewReader(seg.stored), seg.base.Compression)
		require.NoError(t, err)
		got, err := io.ReadAll(dec)
		require.NoError(t, err)
		require.NoError(t, dec.Close())
		require.Equal(t, raw, got)
		sizes[c.Level()] = len(seg.stored)
	}
	require.Equal(t, "", Gzip.Level())
	require.NotEqual(t, sizes["fastest"], sizes["better"], "the level reaches the segment encoder")
	_, err := newSegmentCodec("prod-a", &Pipeline{Compression: "zstd:ultra"})
	require.ErrorIs(t, err, ErrUnknownCompressionLevel)
}
