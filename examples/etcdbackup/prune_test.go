package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// TestPrunePerConfig: prune --name counts one config's backups only.
func TestPrunePerConfig(t *testing.T) {
	tr := &transcript{t: t}
	etcd := etcdtest.Start(t)
	_, err := etcd.Client(t).Put(t.Context(), "/registry/k", "v")
	require.NoError(t, err)
	endpoints := "--endpoints=" + strings.Join(etcd.Endpoints(), ",")
	dir := filepath.Join(t.TempDir(), "backups")
	require.NoError(t, os.Mkdir(dir, 0o700))
	dest := "--destination=file://" + dir
	for _, name := range []string{"hourly", "daily", "hourly", "daily", "hourly"} {
		tr.ok("save", endpoints, dest, "--cluster=c", "--name="+name, "--quiet")
	}
	tr.fails(exitUsage, "prune", dest, "--cluster=c", "--name=Hourly", "--keep=1")
	tr.fails(exitUsage, "prune", dest, "--cluster=c", "--kind=delta", "--keep=1")

	r := tr.ok("prune", dest, "--cluster=c", "--name=hourly", "--keep=1")
	require.Contains(t, r.stdout, "2 deleted")
	count := map[string]int{}
	for _, b := range listJSON(t, tr, dest, "--cluster=c") {
		count[b["name"].(string)]++
	}
	require.Equal(t, map[string]int{"hourly": 1, "daily": 2}, count)

	// Without --name: today's whole-cluster behaviour.
	tr.ok("prune", dest, "--cluster=c", "--keep=1")
	require.Len(t, listJSON(t, tr, dest, "--cluster=c"), 1)
}
