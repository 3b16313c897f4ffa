package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// TestDiffAuth: diff against a live etcd resolves --user NAME:PASSWORD
// and --password-file as every other command does.
func TestDiffAuth(t *testing.T) {
	const password = "pw-" + canary
	etcd := etcdtest.Start(t)
	etcdtest.EnableAuth(t, password, etcd)
	endpoints := "--endpoints=" + strings.Join(etcd.Endpoints(), ",")
	dir := t.TempDir()
	dest := "--destination=file://" + dir
	pwFile := writeFile(t, dir, "pw", password+"\n")
	tr := &transcript{t: t}
	tr.ok("export", endpoints, dest, "--cluster=prod", "--quiet", "--prefix=/a/", "--user=root:"+password)
	// Works: both fields set, no resolution needed.
	tr.ok("diff", endpoints, dest, "--cluster=prod", "--backup=latest", "--user=root", "--password="+password)
	r1 := tr.run("", "diff", endpoints, dest, "--cluster=prod", "--backup=latest", "--user=root:"+password)
	r2 := tr.run("", "diff", endpoints, dest, "--cluster=prod", "--backup=latest", "--user=root", "--password-file="+pwFile)
	t.Logf("--user=root:PW -> %d %s\n--password-file -> %d %s", r1.code, r1.stderr, r2.code, r2.stderr)
	require.Equal(t, exitOK, r1.code, "%s", r1)
	require.Equal(t, exitOK, r2.code, "%s", r2)
}
