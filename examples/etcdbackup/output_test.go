package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// TestOutputJSON: every command that prints a result prints it as JSON
// with --output=json, and refuses another format.
func TestOutputJSON(t *testing.T) {
	tr := &transcript{t: t}
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	for _, k := range []string{"/registry/a", "/registry/b"} {
		_, err := cli.Put(t.Context(), k, "v")
		require.NoError(t, err)
	}
	endpoints := "--endpoints=" + strings.Join(etcd.Endpoints(), ",")
	dest := "--destination=file://" + t.TempDir()
	decode := func(r result, v any) {
		t.Helper()
		require.NoError(t, json.Unmarshal([]byte(r.stdout), v), r.stdout)
	}

	var saved struct {
		ID           string
		Destinations []savedOn
	}
	decode(tr.ok("save", endpoints, dest, "--cluster=prod", "--quiet", "--output=json"), &saved)
	require.NotEmpty(t, saved.ID)
	require.Equal(t, []savedOn{{Destination: "default", Stored: true}}, saved.Destinations)

	var verified verifyOutput
	decode(tr.ok("verify", dest, "--cluster=prod", "--backup="+saved.ID, "--output=json"), &verified)
	require.Equal(t, saved.ID, verified.ID)
	require.True(t, verified.ManifestChecked)
	require.Positive(t, verified.Revision)

	var restored restoreOutput
	dataDir := filepath.Join(t.TempDir(), "member")
	decode(tr.ok("restore", dest, "--cluster=prod", "--data-dir="+dataDir, "--output=json"), &restored)
	require.Equal(t, saved.ID, restored.ID)
	require.Equal(t, dataDir, restored.DataDir)

	var exported struct{ ID string }
	decode(tr.ok("export", endpoints, dest, "--cluster=prod", "--prefix=/registry/", "--output=json"), &exported)
	require.NotEmpty(t, exported.ID)

	var imported struct {
		Keys   int64
		DryRun bool
	}
	decode(tr.ok("import", endpoints, dest, "--cluster=prod", "--backup="+exported.ID, "--dry-run", "--output=json"), &imported)
	require.Equal(t, int64(2), imported.Keys)
	require.True(t, imported.DryRun)

	_, err := cli.Delete(t.Context(), "/registry/a")
	require.NoError(t, err)
	var diff struct {
		Changes []diffChange
		Count   int
	}
	decode(tr.ok("diff", endpoints, dest, "--cluster=prod", "--backup="+exported.ID, "--output=json", "--exit-zero"), &diff)
	require.Equal(t, 1, diff.Count)
	require.Equal(t, "/registry/a", diff.Changes[0].Key)

	tr.fails(exitUsage, "save", endpoints, dest, "--cluster=prod", "--output=yaml")
}
