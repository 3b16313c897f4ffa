package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"filippo.io/age"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
)

// canary stands for a secret: it must never appear in any output.
const canary = "CANARY-s3cr3t-9f2c7d"

// transcript runs the CLI in-process and keeps everything it printed, so
// that a test can check at the end that no secret ever appeared.
type transcript struct {
	t   *testing.T
	mu  sync.Mutex
	all bytes.Buffer
}

type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// lastLine returns the last line of stdout.
func (r result) lastLine() string {
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	return lines[len(lines)-1]
}

func (tr *transcript) run(stdin string, args ...string) result {
	tr.t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(tr.t.Context(), args, strings.NewReader(stdin), &stdout, &stderr)
	tr.mu.Lock()
	// The command line is not kept: a test may pass a secret on it.
	tr.all.WriteString(stdout.String() + stderr.String())
	tr.mu.Unlock()
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// ok runs the CLI and requires exit 0.
func (tr *transcript) ok(args ...string) result {
	tr.t.Helper()
	r := tr.run("", args...)
	require.Equal(tr.t, exitOK, r.code, "etcdbackup %s\n%s", strings.Join(args, " "), r)
	return r
}

// fails runs the CLI and requires the exit code, and an error of exactly
// one line, the last on stderr after any progress.
func (tr *transcript) fails(code int, args ...string) result {
	tr.t.Helper()
	r := tr.run("", args...)
	require.Equal(tr.t, code, r.code, "etcdbackup %s\n%s", strings.Join(args, " "), r)
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	require.True(tr.t, strings.HasPrefix(lines[len(lines)-1], "etcdbackup "+args[0]+": "), "stderr: %q", r.stderr)
	require.Equal(tr.t, 1, strings.Count(r.stderr, "etcdbackup "), "one error line on stderr: %q", r.stderr)
	return r
}

func (tr *transcript) requireNoSecret(secrets ...string) {
	tr.t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	require.NotEmpty(tr.t, tr.all.String())
	for _, s := range secrets {
		require.NotContains(tr.t, tr.all.String(), s, "a secret was printed")
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func allKeys(t *testing.T, cli *clientv3.Client) map[string]string {
	t.Helper()
	resp, err := cli.Get(t.Context(), "/", clientv3.WithPrefix())
	require.NoError(t, err)
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

// TestEndToEnd drives every command against a real etcd and a real MinIO:
// save three encrypted backups, list them, verify one (and fail with the
// wrong key), prune (dry run, then for real), restore the newest and start
// etcd on it, check the destinations; no secret is ever printed.
func TestEndToEnd(t *testing.T) {
	ctx := t.Context()
	tr := &transcript{t: t}
	dir := t.TempDir()

	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	_, err := etcdtest.Fill(ctx, cli, etcdtest.FillOptions{Keys: 400, Seed: 11})
	require.NoError(t, err)
	endpoints := "--endpoints=" + strings.Join(etcd.Endpoints(), ",")

	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	s3URL := fmt.Sprintf("s3://%s/seed-eu?endpoint=%s&insecure=true", bucket, srv.Endpoint())
	offsite := filepath.Join(dir, "offsite")
	require.NoError(t, os.Mkdir(offsite, 0o700))
	secretFile := writeFile(t, dir, "secret-key", srv.SecretKey()+"\n")
	config := writeFile(t, dir, "etcdbackup.yaml", fmt.Sprintf(`default: main
destinations:
  main:
    url: %s
    credentials:
      accessKeyID: %s
      secretAccessKeyFile: %s
  offsite:
    url: file://%s
  broken:
    url: s3://%s/other?endpoint=%s&insecure=true
    credentials:
      accessKeyID: %s
      secretAccessKey: %s
`, s3URL, srv.AccessKey(), filepath.Base(secretFile), offsite, bucket, srv.Endpoint(), srv.AccessKey(), canary))

	identity, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	identityFile := writeFile(t, dir, "identity.txt", "# the backups' key\n"+identity.String()+"\n")
	wrong, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	wrongFile := writeFile(t, dir, "wrong.txt", wrong.String()+"\n")
	recipientFile := writeFile(t, dir, "recipients.txt", "# the backups' recipient\n"+identity.Recipient().String()+"\n")

	// save: three backups to the config's default, with the three
	// compressions (zstd at a level of its own: list, verify and restore
	// read it as any zstd); the ID is the last line of stdout.
	var ids []string
	for i, comp := range []string{"gzip", "none", "zstd:better"} {
		if i == 2 {
			_, err := cli.Put(ctx, "/marker", "newest")
			require.NoError(t, err)
		}
		name, _, _ := strings.Cut(comp, ":")
		r := tr.ok("save", endpoints, "--config="+config, "--cluster=prod", "--name=b"+name,
			"--compression="+comp, "--recipient-file="+recipientFile)
		id := r.lastLine()
		require.True(t, strings.HasPrefix(id, "prod-b"+name+"-"), "backup ID %q", id)
		require.Contains(t, r.stderr, "stored on main", "progress on stderr")
		ids = append(ids, id)
	}
	want := allKeys(t, cli)
	require.Len(t, want, 401)

	// list, as a table and as json.
	table := tr.ok("list", "--config="+config, "--cluster=prod").stdout
	for _, id := range ids {
		require.Contains(t, table, id)
	}
	require.True(t, strings.HasPrefix(table, "ID "), table)
	listed := listJSON(t, tr, "--config="+config, "--cluster=prod")
	require.Len(t, listed, 3)
	for i, b := range listed {
		assert.Equal(t, ids[i], b["id"])
		assert.Equal(t, "prod", b["cluster"])
		assert.Equal(t, "main", b["destination"])
		assert.Equal(t, []string{"gzip", "none", "zstd"}[i], b["compression"])
		assert.Equal(t, true, b["encrypted"])
		assert.Equal(t, false, b["legacy"])
		assert.Len(t, b["sha256"], 64)
		assert.Greater(t, b["size"], 0.0)
		assert.NotEmpty(t, b["created"])
	}
	// The same destination by URL, with the keys from the environment.
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey())
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey())
	require.Len(t, listJSON(t, tr, "--destination="+s3URL, "--cluster=prod"), 3)
	require.Empty(t, listJSON(t, tr, "--destination="+s3URL, "--cluster=other"), "another cluster's folder is empty")

	// verify: the drill passes with the key, fails without it or with
	// another.
	r := tr.ok("verify", "--config="+config, "--cluster=prod", "--identity="+identityFile)
	require.Contains(t, r.stdout, "verified "+ids[2])
	require.Contains(t, r.stdout, "matches the manifest and etcd's trailer")
	r = tr.run(identity.String(), "verify", "--config="+config, "--cluster=prod", "--backup="+ids[0], "--identity=-")
	require.Equal(t, exitOK, r.code, r)
	require.Contains(t, r.stdout, "verified "+ids[0])
	r = tr.fails(exitFailure, "verify", "--config="+config, "--cluster=prod", "--identity="+wrongFile)
	require.Contains(t, r.stderr, "decrypt")
	tr.fails(exitFailure, "verify", "--config="+config, "--cluster=prod")
	tr.fails(exitFailure, "verify", "--config="+config, "--cluster=prod", "--backup=prod-nope", "--identity="+identityFile)

	// prune: the dry run deletes nothing, the real one keeps the newest.
	r = tr.ok("prune", "--config="+config, "--cluster=prod", "--keep=1", "--dry-run")
	require.Contains(t, r.stdout, "dry run: 2 would be deleted, 1 kept")
	require.Len(t, listJSON(t, tr, "--config="+config, "--cluster=prod"), 3)
	r = tr.ok("prune", "--destination=main", "--config="+config, "--cluster=prod", "--keep=1")
	require.Contains(t, r.stdout, "2 deleted, 1 kept")
	listed = listJSON(t, tr, "--config="+config, "--cluster=prod")
	require.Len(t, listed, 1)
	require.Equal(t, ids[2], listed[0]["id"])

	// restore the newest, then start etcd on it: every key is back.
	dataDir := filepath.Join(dir, "restored.etcd")
	r = tr.ok("restore", "--config="+config, "--cluster=prod", "--identity="+identityFile, "--data-dir="+dataDir,
		"--name=restored", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=restored=http://127.0.0.1:2380", "--initial-cluster-token=prod-restored")
	require.Contains(t, r.stdout, "restored "+ids[2]+" into "+dataDir)
	restored := etcdtest.Start(t, etcdtest.WithDataDir(dataDir), etcdtest.WithName("restored"))
	got := allKeys(t, restored.Client(t))
	require.Equal(t, len(want), len(got))
	for k, v := range want {
		if got[k] != v {
			require.Failf(t, "key restored wrong", "key %s: got %d bytes, want %d", k, len(got[k]), len(v))
		}
	}
	require.Equal(t, "newest", got["/marker"])
	// Restore never overwrites.
	tr.fails(exitUsage, "restore", "--config="+config, "--cluster=prod", "--identity="+identityFile, "--data-dir="+dataDir)

	// destinations: main and offsite are available, broken refuses its
	// key, whose value is never printed, even with --verbose.
	r = tr.fails(exitFailure, "destinations", "--config="+config, "--verbose")
	require.Contains(t, r.stderr, "1 of 3 destinations unavailable")
	lines := map[string]string{}
	for _, l := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			lines[f[0]] = l
		}
	}
	require.Contains(t, lines["main"], "Available")
	require.Contains(t, lines["main"], "yes", "main is the default")
	require.Contains(t, lines["offsite"], "Available")
	require.Contains(t, lines["broken"], "Unavailable")
	require.Contains(t, lines["broken"], "auth")
	tr.fails(exitFailure, "list", "--config="+config, "--destination=broken", "--cluster=prod", "--verbose")
	tr.fails(exitFailure, "save", endpoints, "--config="+config, "--destination=broken", "--cluster=prod", "--verbose")

	// A snapshot saved by etcdctl into the offsite folder is listed as
	// legacy and verified on etcd's trailer alone.
	snap, err := cli.Snapshot(ctx)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(offsite, "prod"), 0o700))
	f, err := os.Create(filepath.Join(offsite, "prod", "etcdctl-snapshot.db"))
	require.NoError(t, err)
	_, err = io.Copy(f, snap)
	require.NoError(t, errors.Join(err, snap.Close(), f.Close()))
	listed = listJSON(t, tr, "--config="+config, "--destination=offsite", "--cluster=prod")
	require.Len(t, listed, 1)
	require.Equal(t, "etcdctl-snapshot.db", listed[0]["id"])
	require.Equal(t, true, listed[0]["legacy"])
	require.Equal(t, false, listed[0]["encrypted"])
	r = tr.ok("verify", "--config="+config, "--destination=file://"+offsite, "--cluster=prod", "--backup=etcdctl-snapshot.db")
	require.Contains(t, r.stdout, "legacy object")
	require.Contains(t, r.stdout, "verified etcdctl-snapshot.db")

	// Only the two good destinations: exit 0.
	good := writeFile(t, dir, "good.yaml", fmt.Sprintf("destinations:\n  default:\n    url: file://%s\n  main:\n    url: %s\n", offsite, s3URL))
	tr.ok("destinations", "--config="+good)

	tr.requireNoSecret(canary, srv.SecretKey())
}

func listJSON(t *testing.T, tr *transcript, args ...string) []map[string]any {
	t.Helper()
	r := tr.ok(append([]string{"list", "--output=json"}, args...)...)
	var out []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	require.NotNil(t, out, "an empty list is [], not null")
	return out
}

// TestSaveTLS backs up an etcd that requires client certificates: with
// --cacert, --cert and --key the backup is made, without the client
// certificate it fails.
func TestSaveTLS(t *testing.T) {
	tr := &transcript{t: t}
	ca := etcdtest.NewCA(t)
	files := ca.Issue(t, etcdtest.CertOptions{})
	etcd := etcdtest.Start(t, etcdtest.WithClientTLS(files, true))
	_, err := etcdtest.Fill(t.Context(), etcd.Client(t), etcdtest.FillOptions{Keys: 50, Seed: 5})
	require.NoError(t, err)
	dir := t.TempDir()
	args := []string{"save", "--destination=file://" + dir, "--cluster=tls", "--quiet",
		"--endpoints=" + strings.Join(etcd.Endpoints(), ","), "--cacert=" + files.CAFile}

	r := tr.ok(append(args, "--cert="+files.CertFile, "--key="+files.KeyFile)...)
	require.Empty(t, r.stderr, "--quiet prints no progress")
	require.True(t, strings.HasPrefix(r.lastLine(), "tls-manual-"), r.stdout)
	require.Len(t, listJSON(t, tr, "--destination=file://"+dir, "--cluster=tls"), 1)

	tr.fails(exitFailure, append(args, "--dial-timeout=2s")...)
	require.Len(t, listJSON(t, tr, "--destination=file://"+dir, "--cluster=tls"), 1, "a failed backup leaves nothing visible")
}
