package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// TestBindingSurvivesRestart: a one-shot config written without a
// destination is bound to the default of the moment it was accepted. After
// a restart with another default it stays bound there and its backup,
// taken already, is not taken again. A destination in use cannot be
// removed from the file.
func TestBindingSurvivesRestart(t *testing.T) {
	etcd := etcdtest.Start(t)
	_, err := etcd.Client(t).Put(t.Context(), "/registry/k", "v")
	require.NoError(t, err)
	dir := t.TempDir()
	aDir, bDir := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	require.NoError(t, os.Mkdir(aDir, 0o700))
	require.NoError(t, os.Mkdir(bDir, 0o700))
	config := filepath.Join(dir, "seed.yaml")
	write := func(def string, dests ...string) {
		t.Helper()
		body := fmt.Sprintf("backupRestore:\n  defaultDestination: %s\n  backupDestinations:\n", def)
		for _, d := range dests {
			body += fmt.Sprintf("    %s:\n      url: file://%s\n", d, filepath.Join(dir, d))
		}
		body += fmt.Sprintf("backupConfigs:\n  - {name: once, cluster: prod-a, endpoints: [%s]}\n", strings.Join(etcd.Endpoints(), ", "))
		require.NoError(t, os.WriteFile(config+".new", []byte(body), 0o600))
		require.NoError(t, os.Rename(config+".new", config))
	}
	logs := &syncBuffer{}
	start := func() (stop func() error) {
		_, stop = startManager(t, config, logs)
		return stop
	}

	write("a", "a", "b")
	stop := start()
	require.Eventually(t, func() bool { return countBackups(t, aDir, "prod-a") == 1 }, waitFor, 50*time.Millisecond, "%s", logs)
	// A destination in use stays, whatever the file says.
	write("b", "b")
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "destination is used by backup configs") }, waitFor, 50*time.Millisecond, "%s", logs)
	require.NoError(t, stop())

	// Restarted with another default: still bound to a, not run again.
	write("b", "a", "b")
	stop = start()
	time.Sleep(time.Second)
	require.NoError(t, stop())
	require.Equal(t, 1, countBackups(t, aDir, "prod-a"), "the one-shot backup is not taken again")
	require.Equal(t, 0, countBackups(t, bDir, "prod-a"), "the config did not follow the default\n%s", logs)
	state, err := os.ReadFile(config + ".state.json")
	require.NoError(t, err)
	require.Contains(t, string(state), `"prod-a/once": "a"`)
}

// startManager runs the controller-manager on config until stop is
// called, and returns the base URL of its HTTP endpoints.
func startManager(t *testing.T, config string, logs *syncBuffer) (base string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	base, stopped := serveManager(t, ctx, config, logs, time.Hour)
	return base, func() error { cancel(); return <-stopped }
}

// serveManager runs the controller-manager on config until ctx ends (or
// a signal stops it), with drills every drillEvery, and returns the base
// URL of its HTTP endpoints once it listens, and what run returns.
func serveManager(t *testing.T, ctx context.Context, config string, logs *syncBuffer, drillEvery time.Duration) (string, <-chan error) {
	t.Helper()
	listening := make(chan net.Addr, 1)
	stopped := make(chan error, 1)
	go func() {
		stopped <- run(ctx, options{config: config, listen: "127.0.0.1:0", poll: 50 * time.Millisecond, drillEvery: drillEvery,
			logger: slog.New(slog.NewTextHandler(logs, nil)), listening: func(a net.Addr) { listening <- a }})
	}()
	select {
	case a := <-listening:
		return "http://" + a.String(), stopped
	case err := <-stopped:
		t.Fatalf("run returned %v\n%s", err, logs)
	case <-time.After(waitFor):
		t.Fatalf("not listening\n%s", logs)
	}
	return "", nil
}

// TestFreshnessSurvivesRestart: after a restart, the newest backup's time
// and the backup count per cluster and destination are in /metrics before
// any new backup runs, read from what the destination holds.
func TestFreshnessSurvivesRestart(t *testing.T) {
	etcd := etcdtest.Start(t)
	_, err := etcd.Client(t).Put(t.Context(), "/registry/k", "v")
	require.NoError(t, err)
	dir := t.TempDir()
	aDir := filepath.Join(dir, "a")
	require.NoError(t, os.Mkdir(aDir, 0o700))
	config := filepath.Join(dir, "seed.yaml")
	write := func(schedule string) {
		body := fmt.Sprintf("backupRestore:\n  defaultDestination: a\n  backupDestinations:\n    a:\n      url: file://%s\n"+
			"backupConfigs:\n  - {name: hourly, cluster: prod-a, endpoints: [%s], schedule: '%s'}\n", aDir, strings.Join(etcd.Endpoints(), ", "), schedule)
		require.NoError(t, os.WriteFile(config+".new", []byte(body), 0o600))
		require.NoError(t, os.Rename(config+".new", config))
	}
	logs := &syncBuffer{}
	scrape := func(base string) map[string]float64 {
		resp, err := http.Get(base + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return samples(t, string(b))
	}
	const newest = `etcdbackup_destination_newest_backup_timestamp_seconds{cluster="prod-a",destination="a"}`
	const count = `etcdbackup_destination_backups{cluster="prod-a",destination="a"}`

	write("@every 1s")
	base, stop := startManager(t, config, logs)
	require.Eventually(t, func() bool { return countBackups(t, aDir, "prod-a") >= 2 }, waitFor, 50*time.Millisecond, "%s", logs)
	write("@yearly") // next due in months: no run after the restart
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "@yearly") }, waitFor, 50*time.Millisecond, "%s", logs)
	m := scrape(base)
	require.Contains(t, m, newest, "the library's own commits show at once")
	require.NoError(t, stop())
	before := countBackups(t, aDir, "prod-a")

	base, stop = startManager(t, config, logs)
	defer func() { require.NoError(t, stop()) }()
	require.Eventually(t, func() bool { _, ok := scrape(base)[newest]; return ok }, waitFor, 50*time.Millisecond, "%s", logs)
	m = scrape(base)
	require.Equal(t, float64(before), m[count])
	require.Greater(t, m[newest], float64(time.Now().Add(-time.Minute).Unix()))
	require.Equal(t, before, countBackups(t, aDir, "prod-a"), "no backup ran since the restart")
}
