package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
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

// TestPreChecksFirst: what can be checked before etcd is read or a backup
// downloaded is checked first. An endpoint without a port is a usage
// error at once; a destination that cannot store anything fails save
// before the snapshot starts; a data directory whose parent is missing is
// refused before any download.
func TestPreChecksFirst(t *testing.T) {
	tr := &transcript{t: t}
	etcd := etcdtest.Start(t)
	endpoints := "--endpoints=" + strings.Join(etcd.Endpoints(), ",")
	dir := t.TempDir()
	dest := "--destination=file://" + dir

	r := tr.fails(exitUsage, "save", "--endpoints=127.0.0.1", dest, "--cluster=c")
	require.Contains(t, r.stderr, "has no port")
	tr.fails(exitUsage, "save", "--endpoints=ftp://127.0.0.1:2379", dest, "--cluster=c")

	r = tr.fails(exitFailure, "save", endpoints, "--destination=file://"+filepath.Join(dir, "missing"), "--cluster=c")
	require.Contains(t, r.stderr, "unavailable")
	require.NotContains(t, r.stderr, "started", "no snapshot was taken:\n%s", r)

	tr.ok("save", endpoints, dest, "--cluster=c", "--quiet")
	r = tr.fails(exitUsage, "restore", dest, "--cluster=c", "--data-dir="+filepath.Join(dir, "no", "such", "member"))
	require.Contains(t, r.stderr, "parent")
}

// TestSecondFollowIsWarned: a follow started while another follow of the
// same cluster stores segments on the destination warns that two write
// overlapping segments; the first, started alone, does not.
func TestSecondFollowIsWarned(t *testing.T) {
	tr := &transcript{t: t}
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	dest := "--destination=file://" + t.TempDir()
	endpoints := "--endpoints=" + strings.Join(etcd.Endpoints(), ",")
	first := startFollow(t, endpoints, dest, "--cluster=prod", "--flush-interval=100ms")
	require.Eventually(t, func() bool { return strings.Contains(first.output(), "chain of prod started") }, 30*time.Second, 20*time.Millisecond)
	end := writeSome(t, cli, "/a", 5)
	waitSegments(t, tr, end, dest, "--cluster=prod")
	require.NotContains(t, first.output(), "another follow")

	second := startFollow(t, endpoints, dest, "--cluster=prod", "--flush-interval=100ms")
	require.Eventually(t, func() bool { return strings.Contains(second.output(), "another follow of this cluster may be running") },
		30*time.Second, 20*time.Millisecond, "%s", second.output())
	require.NoError(t, second.stop(t, syscall.SIGTERM))
	require.NoError(t, first.stop(t, syscall.SIGTERM))
}
