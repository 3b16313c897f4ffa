package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// TestEtcdAuth: against an etcd with authentication on, save, follow's
// first steps, export and import connect with --user, with the password
// from --user, --password-file, --password or $ETCDCTL_PASSWORD; without
// one, or with a wrong one, they fail and print no password.
func TestEtcdAuth(t *testing.T) {
	const password = "pw-" + canary
	etcd := etcdtest.Start(t)
	etcdtest.EnableAuth(t, password, etcd)
	_, err := etcd.Client(t).Put(t.Context(), "/registry/a", "1")
	require.NoError(t, err)
	endpoints := "--endpoints=" + strings.Join(etcd.Endpoints(), ",")
	dir := t.TempDir()
	dest := "--destination=file://" + dir
	pwFile := writeFile(t, dir, "pw", password+"\n")
	tr := &transcript{t: t}

	// Without a user etcd refuses; the CLI says so and exits 1.
	tr.fails(exitFailure, "save", endpoints, dest, "--cluster=prod", "--quiet")
	// A user without a password and no terminal: a usage error.
	tr.fails(exitUsage, "save", endpoints, dest, "--cluster=prod", "--quiet", "--user=root")
	tr.fails(exitUsage, "save", endpoints, dest, "--cluster=prod", "--quiet", "--password-file="+pwFile)
	// A wrong password fails without repeating either.
	tr.fails(exitFailure, "save", endpoints, dest, "--cluster=prod", "--quiet", "--user=root:wrong-"+canary)

	tr.ok("save", endpoints, dest, "--cluster=prod", "--quiet", "--user=root:"+password)
	tr.ok("save", endpoints, dest, "--cluster=prod", "--quiet", "--user=root", "--password-file="+pwFile)
	tr.ok("save", endpoints, dest, "--cluster=prod", "--quiet", "--user=root", "--password="+password)
	// The command line beats the environment: a password in --user wins
	// over $ETCDCTL_PASSWORD, which is then the next source.
	t.Setenv("ETCDCTL_PASSWORD", "wrong-"+canary)
	tr.ok("save", endpoints, dest, "--cluster=prod", "--quiet", "--user=root:"+password)
	tr.ok("save", endpoints, dest, "--cluster=prod", "--quiet", "--user=root", "--password-file="+pwFile)
	t.Setenv("ETCDCTL_USER", "root")
	t.Setenv("ETCDCTL_PASSWORD", password)
	tr.ok("save", endpoints, dest, "--cluster=prod", "--quiet")
	tr.ok("export", endpoints, dest, "--cluster=prod", "--quiet", "--prefix=/registry/")
	tr.ok("import", endpoints, dest, "--cluster=prod", "--backup=latest", "--dry-run")
	tr.ok("diff", endpoints, dest, "--cluster=prod", "--backup=latest")
	tr.ok("restore", dest, "--cluster=prod", "--data-dir="+filepath.Join(dir, "restored"))
	tr.requireNoSecret(canary)
}
