package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSmallerOperatorFixes: --version and `help COMMAND` work as an
// operator types them; `list` of a cluster with no backups says so on
// stderr; a config value of the wrong type is described in the config's
// words, not Go's.
func TestSmallerOperatorFixes(t *testing.T) {
	tr := &transcript{t: t}
	r := tr.ok("--version")
	require.Contains(t, r.stdout, "etcdbackup ")
	require.Contains(t, r.stdout, "etcd client v3.")

	r = tr.ok("help", "save")
	require.True(t, strings.HasPrefix(r.stdout, "usage: etcdbackup save "), r.stdout)

	dest := "--destination=file://" + t.TempDir()
	r = tr.ok("list", dest, "--cluster=typo")
	require.Contains(t, r.stderr, `no backups of cluster "typo"`)
	r = tr.ok("list", dest, "--cluster=typo", "--output=json")
	require.Equal(t, "[]\n", r.stdout)

	for content, want := range map[string]string{
		"destinations:\n  main:\n    url: file:///x\n    credentials: oops\n": "line 4: found a string where the config wants the credentials' fields",
		"destinations: [1, 2]\n":                      "line 1: found a list where the config wants a mapping of destination names",
		"destinations:\n  main:\n    readOnly: [1]\n": "line 3: found a list where the config wants true or false",
	} {
		cfg := writeFile(t, t.TempDir(), "config.yaml", content)
		r = tr.fails(exitUsage, "list", "--config="+cfg, "--destination=main", "--cluster=c")
		require.Contains(t, r.stderr, want)
		require.NotContains(t, r.stderr, "main.")
	}
}
