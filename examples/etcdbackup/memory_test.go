package main

import (
	"io"
	"math"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
)

// TestLimitMemory: --memory sets the Go runtime's soft memory limit,
// unless GOMEMLIMIT sets one or the budget is the library's defaults (0);
// a save's budget sets the collector's target too, unless GOGC sets one.
func TestLimitMemory(t *testing.T) {
	prev := debug.SetMemoryLimit(math.MaxInt64)
	prevGC := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetMemoryLimit(prev); debug.SetGCPercent(prevGC) })
	current := func() int64 { return debug.SetMemoryLimit(-1) }
	gcPercent := func() int { return debug.SetGCPercent(100) } // and back to 100

	t.Setenv("GOMEMLIMIT", "")
	t.Setenv("GOGC", "")
	limitMemory(32 << 20)
	got := current()
	debug.SetMemoryLimit(math.MaxInt64) // not kept while the test runs on
	require.Equal(t, int64(32<<20), got)
	require.Equal(t, backup.MemoryLimit(32<<20), got)
	require.Equal(t, 100, gcPercent(), "the limit alone leaves the collector's target")

	tightenGC(32 << 20)
	require.Equal(t, budgetGCPercent, gcPercent())

	limitMemory(0)
	tightenGC(0)
	require.Equal(t, int64(math.MaxInt64), current(), "--memory=0 leaves the runtime's default")
	require.Equal(t, 100, gcPercent(), "--memory=0 leaves the collector's target")

	t.Setenv("GOGC", "200")
	tightenGC(32 << 20)
	require.Equal(t, 100, gcPercent(), "GOGC wins")

	t.Setenv("GOMEMLIMIT", "1GiB")
	limitMemory(32 << 20)
	require.Equal(t, int64(math.MaxInt64), current(), "GOMEMLIMIT wins")
}

// TestCompactSetsNoMemoryLimit: compact's replay holds far more than the
// --memory budget (etcd's index of the chain's keys and revisions), so
// compact sets no process memory limit, which would keep the collector
// running without end; save sets it, and tightens the collector.
func TestCompactSetsNoMemoryLimit(t *testing.T) {
	dest := "--destination=file://" + t.TempDir()
	var limits, gcs []int64
	s := &streams{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard,
		limitMemory: func(b int64) { limits = append(limits, b) }, tightenGC: func(b int64) { gcs = append(gcs, b) }}

	code := runStreams(t.Context(), []string{"compact", dest, "--cluster=prod", "--quiet"}, s)
	require.NotEqual(t, exitOK, code, "a compaction of no chain")
	require.Empty(t, limits, "compact set a memory limit")
	require.Empty(t, gcs, "compact set the collector's target")

	code = runStreams(t.Context(), []string{"save", "--endpoints=127.0.0.1:1", "--dial-timeout=50ms", dest, "--cluster=prod", "--quiet"}, s)
	require.NotEqual(t, exitOK, code, "a save from no etcd")
	require.Equal(t, []int64{defaultMemory}, limits)
	require.Equal(t, []int64{defaultMemory}, gcs)
}
