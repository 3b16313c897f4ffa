package main

import (
	"context"
	"io"
	"math"
	"runtime/debug"
	"strings"
	"testing"
	"time"

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

// TestCompactSetsNoMemoryLimit: compact's replay (etcd's index of the
// chain's keys and revisions), a follower's held responses and segments
// and a copy's listings can pass the --memory budget, so compact, follow
// and copy set no process memory limit, under which the collector would
// run without end; save sets it, and tightens the collector.
func TestCompactSetsNoMemoryLimit(t *testing.T) {
	dest := "--destination=file://" + t.TempDir()
	var limits, gcs []int64
	s := &streams{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard,
		limitMemory: func(b int64) { limits = append(limits, b) }, tightenGC: func(b int64) { gcs = append(gcs, b) }}

	var stderr strings.Builder
	s.stderr = &stderr
	code := runStreams(t.Context(), []string{"compact", dest, "--cluster=prod", "--quiet"}, s)
	require.NotEqual(t, exitOK, code, "a compaction of no chain")
	require.Contains(t, stderr.String(), "prod", "compact failed before it looked for the chain: %s", stderr.String())
	require.Empty(t, limits, "compact set a memory limit")
	require.Empty(t, gcs, "compact set the collector's target")

	// Neither does follow (what a follower holds can pass the budget) nor
	// copy (its listings grow with the backups).
	ctx, cancel := context.WithTimeout(t.Context(), time.Second) // it waits for etcd otherwise
	defer cancel()
	code = runStreams(ctx, []string{"follow", "--endpoints=127.0.0.1:1", "--dial-timeout=50ms", dest, "--cluster=prod", "--quiet"}, s)
	require.NotEqual(t, exitOK, code, "a follow of no etcd")
	code = runStreams(t.Context(), []string{"copy", "--from=file://" + t.TempDir(), "--to=file://" + t.TempDir(), "--cluster=prod", "--all"}, s)
	require.Equal(t, exitOK, code, "a copy of nothing: %s", stderr.String())
	require.Empty(t, limits, "follow or copy set a memory limit")

	code = runStreams(t.Context(), []string{"save", "--endpoints=127.0.0.1:1", "--dial-timeout=50ms", dest, "--cluster=prod", "--quiet"}, s)
	require.NotEqual(t, exitOK, code, "a save from no etcd")
	require.Equal(t, []int64{defaultMemory}, limits)
	require.Equal(t, []int64{defaultMemory}, gcs)
}
