package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
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
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		listening := make(chan net.Addr, 1)
		stopped := make(chan error, 1)
		go func() {
			stopped <- run(ctx, options{config: config, listen: "127.0.0.1:0", poll: 50 * time.Millisecond, drillEvery: time.Hour,
				logger: slog.New(slog.NewTextHandler(logs, nil)), listening: func(a net.Addr) { listening <- a }})
		}()
		select {
		case <-listening:
		case err := <-stopped:
			t.Fatalf("run returned %v\n%s", err, logs)
		case <-time.After(waitFor):
			t.Fatalf("not listening\n%s", logs)
		}
		return func() error { cancel(); return <-stopped }
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
