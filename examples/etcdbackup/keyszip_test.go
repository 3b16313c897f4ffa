package main

import (
	"archive/zip"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// TestKeysZipBackups walks the logical backup paths with --type=keys: an
// export listed as "keys", an import of one prefix (dry run first), a
// diff naming a deleted key, a snapshot turned into a keys zip offline,
// and an export piped into an import; a damaged zip fails before any write.
func TestKeysZipBackups(t *testing.T) {
	ctx := t.Context()
	tr := &transcript{t: t}
	dir := t.TempDir()
	src := etcdtest.Start(t, etcdtest.WithName("source"))
	sc := src.Client(t)
	for i := range 20 {
		for _, p := range []string{"/registry/namespaces/", "/registry/configmaps/ns-a/", "/registry/configmaps/ns-b/"} {
			_, err := sc.Put(ctx, fmt.Sprintf("%sk%02d", p, i), fmt.Sprintf("v%d", i))
			require.NoError(t, err)
		}
	}
	from := "--endpoints=" + strings.Join(src.Endpoints(), ",")
	dest := "--destination=file://" + filepath.Join(dir, "backups")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "backups"), 0o700))
	tr.fails(exitUsage, "export", from, dest, "--cluster=prod", "--type=tar")

	id := tr.ok("export", from, dest, "--cluster=prod", "--type=keys", "--prefix=/registry/namespaces/", "--prefix=/registry/configmaps/ns-a/", "--quiet").lastLine()
	listed := listJSON(t, tr, dest, "--cluster=prod")
	require.Len(t, listed, 1)
	require.Equal(t, "keys", listed[0]["kind"])

	dst := etcdtest.Start(t, etcdtest.WithName("target"))
	dc := dst.Client(t)
	to := "--endpoints=" + strings.Join(dst.Endpoints(), ",")
	r := tr.ok("import", to, dest, "--cluster=prod", "--backup="+id, "--prefix=/registry/configmaps/ns-a/", "--dry-run")
	require.Contains(t, r.stdout, "20 created")
	requireKeys(t, dc, "/", 0)
	r = tr.ok("import", to, dest, "--cluster=prod", "--prefix=/registry/configmaps/ns-a/")
	require.Contains(t, r.stdout, "20 created")
	requireKeys(t, dc, "/", 20)

	_, err := sc.Delete(ctx, "/registry/configmaps/ns-a/k07")
	require.NoError(t, err)
	r = tr.ok("diff", from, dest, "--cluster=prod", "--backup="+id, "--exit-zero")
	require.Equal(t, "removed \"/registry/configmaps/ns-a/k07\"\n", r.stdout)

	snapID := tr.ok("save", from, dest, "--cluster=prod", "--quiet").lastLine()
	zipID := tr.ok("export", dest, "--cluster=prod", "--type=keys", "--from-backup="+snapID, "--prefix=/registry/configmaps/ns-b/", "--name=from-snapshot", "--quiet").lastLine()
	_, err = sc.Put(ctx, "/registry/configmaps/ns-b/k03", "changed")
	require.NoError(t, err)
	r = tr.ok("diff", from, dest, "--cluster=prod", "--backup="+zipID, "--exit-zero")
	require.Equal(t, "changed \"/registry/configmaps/ns-b/k03\"\n", r.stdout)

	// Through a pipe, uncompressed: the stream is the zip itself.
	plain := tr.ok("export", from, "--destination=-", "--cluster=prod", "--type=keys", "--compression=none", "--prefix=/registry/configmaps/ns-b/")
	zr, err := zip.NewReader(bytes.NewReader([]byte(plain.stdout)), int64(len(plain.stdout)))
	require.NoError(t, err)
	require.Len(t, zr.File, 21)
	require.Equal(t, backup.KeysZipIndex, zr.File[20].Name)
	damaged := plain.stdout[:len(plain.stdout)-10]
	bad := tr.run(damaged, "import", to, "--from=-")
	require.Equal(t, exitUsage, bad.code, bad.String())
	requireKeys(t, dc, "/registry/configmaps/ns-b/", 0)
	piped := tr.run(plain.stdout, "import", to, "--from=-")
	require.Equal(t, exitOK, piped.code, piped.String())
	requireKeys(t, dc, "/registry/configmaps/ns-b/", 20)
}
