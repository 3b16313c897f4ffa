package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

func openPTY(t *testing.T) (tty *os.File, out *syncWriter) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	require.NoError(t, err)
	out = &syncWriter{w: &bytes.Buffer{}}
	done := make(chan struct{})
	go func() { defer close(done); _, _ = io.Copy(out, ptmx) }()
	t.Cleanup(func() { _ = tty.Close(); _ = ptmx.Close(); <-done })
	return tty, out
}

// TestProgressOnATerminal: on a pseudo-terminal the progress is one line
// redrawn in place, with the percent of the expected size, and it moves
// on its timer while no byte does; in a pipe it is plain lines.
func TestProgressOnATerminal(t *testing.T) {
	tty, out := openPTY(t)
	p := newProgress(tty)
	_, ok := p.(*termProgress)
	require.True(t, ok, "a terminal gets the redrawn line")
	p.Observe(backup.Event{Kind: backup.Started, ID: "prod-manual-1", Cluster: "prod"})
	p.Observe(backup.Event{Kind: backup.Progress, RawBytes: 256 << 20, ExpectedBytes: 1 << 30})
	require.Eventually(t, func() bool { return strings.Count(out.String(), "(25%)") >= 2 }, 30*time.Second, 50*time.Millisecond,
		"redrawn at least twice with no new event:\n%q", out.String())
	p.Observe(backup.Event{Kind: backup.Completed, ID: "prod-manual-1", RawBytes: 1 << 30, Elapsed: 3 * time.Second})
	p.close()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "completed in") }, 30*time.Second, 20*time.Millisecond)
	got := out.String()
	require.Contains(t, got, "\r\x1b[K  256.0 MiB of 1.0 GiB (25%)")
	require.Contains(t, got, "left")
	require.Contains(t, got, "backup prod-manual-1 completed in 3s")

	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	piped := newProgress(w)
	_, ok = piped.(*saveProgress)
	require.True(t, ok, "a pipe gets plain lines")
	piped.Observe(backup.Event{Kind: backup.Progress, RawBytes: 256 << 20, ExpectedBytes: 1 << 30})
	piped.close()
	require.NoError(t, w.Close())
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	require.NotContains(t, string(b), "\r")
	require.Contains(t, string(b), "256.0 MiB read")
}

// TestSaveOnATerminal: the CLI's save with stderr on a pseudo-terminal
// prints its lines there, and its result on stdout.
func TestSaveOnATerminal(t *testing.T) {
	tty, out := openPTY(t)
	etcd := etcdtest.Start(t)
	var stdout strings.Builder
	code := run(t.Context(), []string{"save", "--endpoints=" + etcd.Endpoints()[0], "--destination=file://" + t.TempDir(), "--cluster=prod"},
		strings.NewReader(""), &stdout, tty)
	require.Equal(t, exitOK, code, out.String())
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "completed in") }, 30*time.Second, 20*time.Millisecond, "%q", out.String())
	require.Contains(t, out.String(), "\r\x1b[Kbackup prod-manual-")
	require.True(t, strings.HasPrefix(stdout.String(), "prod-manual-"))
}

// TestProgressEstimateSettles: the time left is not estimated before the
// read settles (no "5h16m6s left" in the first second), and a pause
// between bursts of progress moves the rate a little, not to zero.
func TestProgressEstimateSettles(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	now := t0
	p := newTermProgress(io.Discard, func() time.Time { return now }, time.Hour)
	p.Observe(backup.Event{Kind: backup.Started, ID: "prod-manual-1", Cluster: "prod"})
	defer p.close()
	at := func(d time.Duration, raw int64) string {
		now = t0.Add(d)
		p.mu.Lock()
		defer p.mu.Unlock()
		p.raw, p.expected = raw, 1<<30
		return p.line()
	}
	require.Contains(t, at(500*time.Millisecond, 10<<10), "? left", "no estimate in the first moments")
	for i := 1; i <= 6; i++ { // 100 MiB/s
		at(time.Duration(i)*time.Second, int64(i)*100<<20)
	}
	require.Contains(t, at(6500*time.Millisecond, 600<<20), "MiB/s")
	line := at(7*time.Second, 600<<20) // a pause between bursts
	require.Regexp(t, `, (\d\d)\.\d MiB/s, \ds left$`, line, "a second's pause keeps the estimate in seconds")
}
