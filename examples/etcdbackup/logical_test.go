package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// TestLogicalBackups walks the "restore one namespace" path: export two
// prefixes, list the export, see what an import would change, import one
// namespace into another etcd, find what a bad deploy deleted with diff,
// and pipe an encrypted export straight into an import.
func TestLogicalBackups(t *testing.T) {
	ctx := t.Context()
	tr := &transcript{t: t}
	dir := t.TempDir()
	src := etcdtest.Start(t, etcdtest.WithName("source"))
	sc := src.Client(t)
	for i := range 30 {
		for _, p := range []string{"/registry/namespaces/", "/registry/configmaps/ns-a/", "/registry/configmaps/ns-b/"} {
			_, err := sc.Put(ctx, fmt.Sprintf("%sk%02d", p, i), fmt.Sprintf("v%d", i))
			require.NoError(t, err)
		}
	}
	from := "--endpoints=" + strings.Join(src.Endpoints(), ",")
	dest := "--destination=file://" + filepath.Join(dir, "backups")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "backups"), 0o700))

	r := tr.ok("export", from, dest, "--cluster=prod", "--prefix=/registry/namespaces/", "--prefix=/registry/configmaps/ns-a/", "--quiet")
	id := r.lastLine()
	require.Regexp(t, `^prod-export-`, id)
	listed := listJSON(t, tr, dest, "--cluster=prod")
	require.Len(t, listed, 1)
	require.Equal(t, "keys-json", listed[0]["kind"])
	require.NotZero(t, listed[0]["revision"])
	tr.fails(exitFailure, "restore", dest, "--cluster=prod", "--data-dir="+filepath.Join(dir, "member"))

	dst := etcdtest.Start(t, etcdtest.WithName("target"))
	dc := dst.Client(t)
	to := "--endpoints=" + strings.Join(dst.Endpoints(), ",")
	r = tr.ok("import", to, dest, "--cluster=prod", "--backup="+id, "--prefix=/registry/configmaps/ns-a/", "--dry-run")
	require.Contains(t, r.stdout, "would import (dry run) 30 keys")
	require.Contains(t, r.stdout, "30 created")
	requireKeys(t, dc, "/", 0)

	r = tr.ok("import", to, dest, "--cluster=prod", "--prefix=/registry/configmaps/ns-a/")
	require.Contains(t, r.stdout, "30 created")
	requireKeys(t, dc, "/registry/configmaps/ns-a/", 30)
	requireKeys(t, dc, "/", 30) // nothing outside the prefix

	// A bad deploy deletes a key; diff names it.
	_, err := sc.Delete(ctx, "/registry/configmaps/ns-a/k07")
	require.NoError(t, err)
	// diff exits 1 when keys differ, as diff(1), or 0 with --exit-zero.
	r = tr.run("", "diff", from, dest, "--cluster=prod", "--backup="+id)
	require.Equal(t, exitFailure, r.code, r.String())
	require.Equal(t, "removed \"/registry/configmaps/ns-a/k07\"\n", r.stdout)
	require.Equal(t, "1 keys differ\n", r.stderr, "no error line: the count says it")
	r = tr.ok("diff", from, dest, "--cluster=prod", "--backup="+id, "--prefix=/registry/", "--exit-zero")
	require.Equal(t, "removed \"/registry/configmaps/ns-a/k07\"\n", r.stdout, "keys the export never read are not added")
	tr.fails(exitUsage, "diff", from, dest, "--cluster=prod", "--backup="+id, "--prefix=/registry/secrets/")

	// An encrypted export through a pipe, into an import from stdin.
	identity, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	idFile := writeFile(t, dir, "identity", identity.String()+"\n")
	stream := tr.ok("export", from, "--destination=-", "--cluster=prod", "--prefix=/registry/configmaps/ns-b/", "--recipient="+identity.Recipient().String())
	require.True(t, strings.HasPrefix(stream.stdout, "age-encryption.org/"))
	piped := tr.run(stream.stdout, "import", to, "--from=-", "--identity="+idFile)
	require.Equal(t, exitOK, piped.code, piped.String())
	requireKeys(t, dc, "/registry/configmaps/ns-b/", 30)

	// A damaged stream fails with a typed error before anything is written.
	plain := tr.ok("export", from, "--destination=-", "--cluster=prod", "--compression=none", "--prefix=/registry/namespaces/")
	damaged := strings.Replace(plain.stdout, `"key":"`, `"key":"%`, 3)
	bad := tr.run(damaged, "import", to, "--from=-")
	require.Equal(t, exitUsage, bad.code, bad.String())
	requireKeys(t, dc, "/registry/namespaces/", 0)
	small := tr.run(plain.stdout, "import", to, "--from=-", "--max-bytes=1KiB")
	require.Equal(t, exitUsage, small.code, small.String())
	require.Contains(t, small.stderr, "larger than 1024 bytes")
	requireKeys(t, dc, "/registry/namespaces/", 0)

	// Every old snapshot can serve a prefix restore: a save, turned into
	// keys-json offline, then compared with the live etcd.
	snapID := tr.ok("save", from, dest, "--cluster=prod", "--quiet").lastLine()
	r = tr.ok("export", dest, "--cluster=prod", "--from-backup="+snapID, "--prefix=/registry/configmaps/ns-b/", "--name=from-snapshot", "--quiet")
	require.Regexp(t, `^prod-from-snapshot-`, r.lastLine())
	_, err = sc.Put(ctx, "/registry/configmaps/ns-b/k03", "changed")
	require.NoError(t, err)
	r = tr.ok("diff", from, dest, "--cluster=prod", "--backup="+r.lastLine(), "--exit-zero")
	require.Equal(t, "changed \"/registry/configmaps/ns-b/k03\"\n", r.stdout)
	r = tr.ok("diff", from, dest, "--cluster=prod", "--backup="+snapID, "--prefix=/registry/configmaps/", "--exit-zero")
	require.Equal(t, "changed \"/registry/configmaps/ns-b/k03\"\n", r.stdout, "a snapshot compared offline, with the key deleted earlier missing from both")

	// A snapshot through a pipe: save to stdout, restore from stdin.
	snap := tr.ok("save", from, "--destination=-", "--cluster=prod", "--recipient="+identity.Recipient().String())
	dataDir := filepath.Join(dir, "from-stdin")
	r = tr.run(snap.stdout, "restore", "--from=-", "--identity="+idFile, "--data-dir="+dataDir)
	require.Equal(t, exitOK, r.code, r.String())
	_, err = os.Stat(filepath.Join(dataDir, "member", "snap", "db"))
	require.NoError(t, err)
	cut := tr.run(snap.stdout[:len(snap.stdout)-100], "restore", "--from=-", "--identity="+idFile, "--data-dir="+filepath.Join(dir, "cut"))
	require.Equal(t, exitFailure, cut.code, cut.String())
	_, err = os.Stat(filepath.Join(dir, "cut"))
	require.ErrorIs(t, err, os.ErrNotExist, "a damaged stream leaves no data directory")
	tr.requireNoSecret(identity.String())
}

func requireKeys(t *testing.T, c *clientv3.Client, prefix string, n int) {
	t.Helper()
	resp, err := c.Get(t.Context(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	require.EqualValues(t, n, resp.Count, prefix)
}
