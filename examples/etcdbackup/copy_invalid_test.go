package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// TestCopyInvalidManifestFails: `copy --all` from a destination holding a
// manifest of a newer format (listed invalid) copies the other backup,
// reports that manifest not copied and what is wrong with it, and exits 1:
// the target does not hold everything the source does.
func TestCopyInvalidManifestFails(t *testing.T) {
	tr := &transcript{t: t}
	dir := t.TempDir()
	etcd := etcdtest.Start(t)
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	require.NoError(t, os.Mkdir(a, 0o700))
	require.NoError(t, os.Mkdir(b, 0o700))
	config := writeFile(t, dir, "etcdbackup.yaml", fmt.Sprintf("default: a\ndestinations:\n  a:\n    url: file://%s\n  b:\n    url: file://%s\n", a, b))
	endpoints := "--endpoints=" + strings.Join(etcd.Endpoints(), ",")
	cli := etcd.Client(t)
	for i := range 2 {
		writeSome(t, cli, fmt.Sprintf("/k%d", i), 5)
		tr.ok("save", endpoints, "--config="+config, "--destination=a", "--cluster=prod", "--quiet", "--name=n")
	}
	manifests, err := filepath.Glob(filepath.Join(a, "prod", "*.manifest.json"))
	require.NoError(t, err)
	require.Len(t, manifests, 2)
	raw, err := os.ReadFile(manifests[1])
	require.NoError(t, err)
	newer := strings.Replace(string(raw), `"format": 1,`, `"format": 9,`, 1)
	require.NotEqual(t, string(raw), newer)
	require.NoError(t, os.WriteFile(manifests[1], []byte(newer), 0o600))

	r := tr.fails(exitFailure, "copy", "--config="+config, "--cluster=prod", "--from=a", "--to=b", "--all", "--output=json")
	assert.Contains(t, r.stderr, "format 9 is not supported")
	var out copyResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	assert.Equal(t, 1, out.Copied)
	assert.Equal(t, 1, out.NotCopied)
	var notCopied []copiedBackup
	for _, bk := range out.Backups {
		if bk.Outcome == "not-copied" {
			notCopied = append(notCopied, bk)
		}
	}
	require.Len(t, notCopied, 1)
	assert.Equal(t, "invalid", notCopied[0].Kind)
	assert.Contains(t, notCopied[0].Error, filepath.Base(manifests[1]))
	assert.Len(t, listJSON(t, tr, "--config="+config, "--destination=b", "--cluster=prod"), 1)
}
