package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/fileblob"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// pruneSetup starts an etcd holding a key and makes an empty file
// destination: the CLI's flags for both, and the destination's directory.
func pruneSetup(t *testing.T) (tr *transcript, endpoints, dir, dest string) {
	t.Helper()
	etcd := etcdtest.Start(t)
	_, err := etcd.Client(t).Put(t.Context(), "/registry/k", "v")
	require.NoError(t, err)
	dir = filepath.Join(t.TempDir(), "backups")
	require.NoError(t, os.Mkdir(dir, 0o700))
	return &transcript{t: t}, "--endpoints=" + strings.Join(etcd.Endpoints(), ","), dir, "--destination=file://" + dir
}

// TestPrunePerConfig: prune --name counts one config's backups only.
func TestPrunePerConfig(t *testing.T) {
	tr, endpoints, _, dest := pruneSetup(t)
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

// TestPrunePolicies: prune --gfs keeps what the library's planner keeps
// for the same backups and policy; --max-age and --keep-within are
// policies too; no rule at all, or a malformed one, is a usage error.
func TestPrunePolicies(t *testing.T) {
	tr, endpoints, dir, dest := pruneSetup(t)
	for range 4 {
		tr.ok("save", endpoints, dest, "--cluster=c", "--quiet")
	}
	for _, bad := range [][]string{{}, {"--gfs=hours"}, {"--gfs=years=3"}, {"--gfs=days=0"}, {"--keep=2", "--keep-last=3"}, {"--keep-within=2h", "--max-age=1h"}} {
		tr.fails(exitUsage, append([]string{"prune", dest, "--cluster=c"}, bad...)...)
	}

	// What the planner keeps of these backups with the same policy.
	gb, err := fileblob.OpenBucket(dir, nil)
	require.NoError(t, err)
	defer gb.Close()
	entries, err := backup.ListBackups(t.Context(), blob.New(gb, nil), "c")
	require.NoError(t, err)
	plan, err := retention.MakePlan("c", entries, retention.Policy{Hours: 2, Days: 1}, time.Now(), retention.PlanOptions{})
	require.NoError(t, err)
	var want []string
	for _, d := range plan.Decisions {
		if d.Action == retention.Keep {
			want = append(want, d.Entry.ID)
		}
	}
	require.Len(t, want, 1, "the newest of this hour")

	r := tr.ok("prune", dest, "--cluster=c", "--gfs=hours=2,days=1", "--dry-run", "--output=json")
	var dry struct {
		DryRun bool
		Items  []pruneItem
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &dry))
	require.True(t, dry.DryRun)
	require.Len(t, dry.Items, 4)
	require.Len(t, listJSON(t, tr, dest, "--cluster=c"), 4, "a dry run deletes nothing")

	tr.ok("prune", dest, "--cluster=c", "--gfs=hours=2,days=1")
	var got []string
	for _, b := range listJSON(t, tr, dest, "--cluster=c") {
		got = append(got, b["id"].(string))
	}
	require.Equal(t, want, got)

	// Every backup is younger than an hour: max-age 1h keeps them; 1ns
	// deletes every one a keep rule selected but the newest, which
	// retention never deletes.
	for range 2 {
		tr.ok("save", endpoints, dest, "--cluster=c", "--quiet")
	}
	tr.ok("prune", dest, "--cluster=c", "--keep-last=5", "--max-age=1h")
	all := listJSON(t, tr, dest, "--cluster=c")
	require.Len(t, all, 3)
	tr.ok("prune", dest, "--cluster=c", "--keep-last=5", "--max-age=1ns")
	left := listJSON(t, tr, dest, "--cluster=c")
	require.Len(t, left, 1)
	require.Equal(t, all[2]["id"], left[0]["id"])
}

// TestPruneKeepsChains: a full backup a follow chain starts from survives
// `prune --keep-last=1` after a newer save, and every revision of the chain
// still restores; so it does with --point-in-time, whose window's base
// cannot be proven past backups this fresh.
func TestPruneKeepsChains(t *testing.T) {
	tr := &transcript{t: t}
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	writeSome(t, cli, "/before", 5)
	dest := "--destination=file://" + t.TempDir()
	endpoints := "--endpoints=" + strings.Join(etcd.Endpoints(), ",")
	f := startFollow(t, endpoints, dest, "--cluster=prod", "--flush-interval=100ms")
	require.Eventually(t, func() bool { return strings.Contains(f.output(), "chain of prod started") }, 30*time.Second, 20*time.Millisecond)
	mid := writeSome(t, cli, "/a", 20)
	waitSegments(t, tr, mid, dest, "--cluster=prod")
	require.NoError(t, f.stop(t, syscall.SIGTERM), f.output())
	tr.ok("save", endpoints, dest, "--cluster=prod", "--quiet")

	r := tr.ok("prune", dest, "--cluster=prod", "--keep-last=1", "--output=json")
	var report struct{ Items []pruneItem }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &report), r.stdout)
	for _, it := range report.Items {
		require.NotEqual(t, "deleted", it.Outcome, "%+v: nothing of a chain without a window is deleted, and the other full is the newest", it)
	}
	requireRestored(t, tr, cli, mid-3, dest, "--to-revision="+strconv.FormatInt(mid-3, 10))

	// A window that ends now cannot move its base past backups written
	// within the clock skew: the store's times cannot prove them before
	// it, so the chain stays whole (retention's own tests move the clock).
	r = tr.ok("prune", dest, "--cluster=prod", "--keep-last=1", "--point-in-time=1ns", "--output=json")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &report), r.stdout)
	for _, it := range report.Items {
		require.NotEqual(t, "deleted", it.Outcome, "%+v", it)
	}
	requireRestored(t, tr, cli, mid, dest, "--to-revision="+strconv.FormatInt(mid, 10))
}

// TestDryRunsPredict: a dry run makes the checks the real run makes, so
// on a read-only destination `prune --dry-run` and `delete --dry-run` fail
// as the real runs do.
func TestDryRunsPredict(t *testing.T) {
	tr, endpoints, dir, dest := pruneSetup(t)
	tr.ok("save", endpoints, dest, "--cluster=c", "--quiet")
	id := listJSON(t, tr, dest, "--cluster=c")[0]["id"].(string)
	cfg := writeFile(t, t.TempDir(), "config.yaml", "destinations:\n  ro:\n    url: file://"+dir+"\n    readOnly: true\n")
	for _, args := range [][]string{
		{"prune", "--config=" + cfg, "--destination=ro", "--cluster=c", "--keep-last=1"},
		{"delete", "--config=" + cfg, "--destination=ro", "--cluster=c", "--backup=" + id},
	} {
		real := tr.run("", args...)
		dry := tr.run("", append(args, "--dry-run")...)
		require.NotEqual(t, exitOK, real.code, "%s", real)
		require.Equal(t, real.code, dry.code, "a dry run exits as the real run: %s\n%s", real, dry)
		require.Contains(t, dry.stderr, "read-only")
	}
	require.Len(t, listJSON(t, tr, dest, "--cluster=c"), 1)
}

// TestRestoreDefaultIsNewestPoint: restore without --backup or a point
// restores the end of the newest chain and says which revision; with
// --backup=latest it restores exactly the newest full backup.
func TestRestoreDefaultIsNewestPoint(t *testing.T) {
	tr := &transcript{t: t}
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	writeSome(t, cli, "/before", 5)
	dest := "--destination=file://" + t.TempDir()
	endpoints := "--endpoints=" + strings.Join(etcd.Endpoints(), ",")
	f := startFollow(t, endpoints, dest, "--cluster=prod", "--flush-interval=100ms")
	require.Eventually(t, func() bool { return strings.Contains(f.output(), "chain of prod started") }, 30*time.Second, 20*time.Millisecond)
	end := writeSome(t, cli, "/a", 12)
	waitSegments(t, tr, end, dest, "--cluster=prod")
	require.NoError(t, f.stop(t, syscall.SIGTERM), f.output())

	requireRestored(t, tr, cli, end, dest)

	r := tr.ok("restore", dest, "--cluster=prod", "--backup=latest", "--data-dir="+filepath.Join(t.TempDir(), "m"), "--quiet")
	require.Contains(t, r.stdout, "restored prod-full-")
}
