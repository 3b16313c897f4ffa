package backup_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/backup/backuptest"
)

func TestCompressionLevelValidate(t *testing.T) {
	for _, tc := range []struct {
		c         backup.Compression
		algorithm backup.Compression
		level     string
		err       error
	}{
		{c: "", algorithm: backup.Zstd, level: "fastest"},
		{c: backup.Zstd, algorithm: backup.Zstd, level: "fastest"},
		{c: backup.ZstdFastest, algorithm: backup.Zstd, level: "fastest"},
		{c: backup.ZstdDefault, algorithm: backup.Zstd, level: "default"},
		{c: backup.ZstdBetter, algorithm: backup.Zstd, level: "better"},
		{c: backup.Gzip, algorithm: backup.Gzip},
		{c: backup.None, algorithm: backup.None},
		{c: "zstd:best", err: backup.ErrUnknownCompressionLevel},
		{c: "zstd:", err: backup.ErrUnknownCompressionLevel},
		{c: "zstd:FASTEST", err: backup.ErrUnknownCompressionLevel},
		{c: "gzip:fastest", err: backup.ErrUnknownCompressionLevel},
		{c: "none:default", err: backup.ErrUnknownCompressionLevel},
		{c: "lz4", err: backup.ErrUnknownCompression},
		{c: "lz4:fast", err: backup.ErrUnknownCompression},
	} {
		t.Run(string(tc.c), func(t *testing.T) {
			err := tc.c.Validate()
			if tc.err == nil {
				require.NoError(t, err)
				require.Equal(t, tc.algorithm, tc.c.Algorithm())
				require.Equal(t, tc.level, tc.c.Level())
				return
			}
			require.ErrorIs(t, err, tc.err)
			require.ErrorIs(t, err, backup.ErrUnknownCompression, "every compression error matches the one sentinel")
			if !errors.Is(tc.err, backup.ErrUnknownCompressionLevel) {
				require.NotErrorIs(t, err, backup.ErrUnknownCompressionLevel)
			}
		})
	}
}

// kubeLikeSnapshot returns an etcd snapshot stream of objects shaped like
// a Kubernetes API server's: JSON with repeated field names and varying
// values, so that compression levels store different sizes.
func kubeLikeSnapshot(t *testing.T, n int) []byte {
	t.Helper()
	keys := make(map[string]string, n)
	for i := range n {
		keys[fmt.Sprintf("/registry/configmaps/ns-%d/cm-%d", i%17, i)] = fmt.Sprintf(
			`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm-%d","namespace":"ns-%d","uid":"%08x-1c2d-4e5f-8a9b-%012x","resourceVersion":"%d","labels":{"app":"app-%d","tier":"%s"}},"data":{"config.yaml":"%s"}}`,
			i, i%17, i*7919, i*104729, 1000+i, i%23, []string{"web", "db", "cache"}[i%3], strings.Repeat(fmt.Sprintf("key%d: value-%d\\n", i%31, i*i%9973), 20+i%13))
	}
	stream, _, err := backuptest.KeysSnapshot(keys)
	require.NoError(t, err)
	return stream
}

// TestPipelineZstdLevels backs up one snapshot at every zstd level: each
// manifest records zstd (what reading needs) and the level apart, each
// object decodes with the manifest's Compression alone, and the levels do
// change the stored size.
func TestPipelineZstdLevels(t *testing.T) {
	defer goleak.VerifyNone(t)
	stream := kubeLikeSnapshot(t, 3000)
	stored := map[backup.Compression]int64{}
	for _, tc := range []struct {
		c     backup.Compression
		level string
	}{
		{backup.ZstdFastest, "fastest"},
		{backup.ZstdDefault, "default"},
		{backup.ZstdBetter, "better"},
		{backup.Zstd, "fastest"},
		{"", "fastest"},
	} {
		for _, budget := range []int64{0, 16 << 20} {
			u := newMemUploader()
			p := &backup.Pipeline{Snapshotter: newSnapshotter(stream), Compression: tc.c, MemoryBudget: budget}
			_, err := p.Run(t.Context(), backup.Request{Cluster: "c", Name: "n",
				Targets: []backup.Target{{Destination: "a", Uploader: u}}})
			require.NoError(t, err)
			m, data := u.only(t)
			require.Equal(t, backup.Zstd, m.Compression, "%s", tc.c)
			require.Equal(t, tc.level, m.CompressionLevel, "%s", tc.c)
			require.True(t, strings.HasSuffix(m.DataKey, ".zst"), m.DataKey)
			require.NoError(t, m.Validate())
			require.Equal(t, stream, decode(t, m, data))
			if budget == 0 {
				stored[tc.c] = m.Stored.Size
			}
		}
	}
	t.Logf("raw %d, stored: fastest %d, default %d, better %d", len(stream),
		stored[backup.ZstdFastest], stored[backup.ZstdDefault], stored[backup.ZstdBetter])
	require.Equal(t, stored[backup.ZstdFastest], stored[backup.Zstd], "zstd is zstd:fastest")
	require.Greater(t, stored[backup.ZstdFastest], stored[backup.ZstdDefault])
	require.Greater(t, stored[backup.ZstdDefault], stored[backup.ZstdBetter])
}

func TestPipelineRejectsUnknownLevel(t *testing.T) {
	for _, c := range []backup.Compression{"zstd:ultra", "gzip:9"} {
		u := newMemUploader()
		_, err := (&backup.Pipeline{Snapshotter: newSnapshotter(fakeSnapshot(t, 10, 1)), Compression: c}).Run(t.Context(),
			backup.Request{Cluster: "c", Name: "n", Targets: []backup.Target{{Destination: "a", Uploader: u}}})
		require.ErrorIs(t, err, backup.ErrUnknownCompressionLevel, c)
		require.Empty(t, u.manifests, c)
	}
}

// TestManifestCompressionLevel: a manifest records the algorithm in
// Compression; a level this version does not know is accepted (a newer
// writer's), a level that is not a name is not, and neither is a level in
// Compression itself.
func TestManifestCompressionLevel(t *testing.T) {
	for _, tc := range []struct {
		compression backup.Compression
		level       string
		ok          bool
	}{
		{backup.Zstd, "", true},
		{backup.Zstd, "better", true},
		{backup.Zstd, "ultra", true},
		{backup.Zstd, "19", true}, // a newer writer's level by number
		{backup.Zstd, "level-3", true},
		{backup.Zstd, "better fast", false},
		{backup.Zstd, "Better", false},
		{backup.Zstd, "better\n", false},
		{backup.Zstd, strings.Repeat("a", 33), false},
		{backup.ZstdBetter, "", false},
	} {
		m := validManifest()
		m.Compression, m.CompressionLevel = tc.compression, tc.level
		if tc.ok {
			require.NoError(t, m.Validate(), "%s %q", tc.compression, tc.level)
		} else {
			require.Error(t, m.Validate(), "%s %q", tc.compression, tc.level)
		}
	}
}
