package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
)

// copyFixture is a cluster with encrypted backups on MinIO: standalone
// full backups and a chain of delta segments, and the revisions to
// restore.
type copyFixture struct {
	tr       *transcript
	config   string
	identity string // the age identity file; copy never gets it
	etcd     *etcdtest.Server
	revs     []int64 // revisions to restore: a full's, the chain's
	files    map[string]string
}

// The sizes of the copy fixtures: the whole copy runs on the large one;
// the kills, each a process copying again from the start, on the small.
const (
	copyFulls, copySegments           = 20, 200
	copyFullsSmall, copySegmentsSmall = 5, 30
)

// newCopyFixture starts etcd and two MinIO servers and fills destination
// "a" (MinIO) with fulls saves and a chain of at least segs segments;
// "b" is another MinIO server, "c", "d" and "e" file destinations.
func newCopyFixture(t *testing.T, fulls, segs int) *copyFixture {
	dir := t.TempDir()
	f := &copyFixture{tr: &transcript{t: t}, etcd: etcdtest.Start(t), files: map[string]string{}}
	var dests strings.Builder
	for _, name := range []string{"a", "b"} {
		srv := miniotest.Start(t)
		fmt.Fprintf(&dests, "  %s:\n    url: s3://%s/seed?endpoint=%s&insecure=true\n    credentials:\n      accessKeyID: %s\n      secretAccessKey: %s\n",
			name, srv.NewBucket(t, miniotest.BucketOptions{}), srv.Endpoint(), srv.AccessKey(), srv.SecretKey())
	}
	for _, name := range []string{"c", "d", "e"} {
		f.files[name] = filepath.Join(dir, name)
		require.NoError(t, os.Mkdir(f.files[name], 0o700))
		fmt.Fprintf(&dests, "  %s:\n    url: file://%s\n", name, f.files[name])
	}
	f.config = writeFile(t, dir, "etcdbackup.yaml", "default: a\ndestinations:\n"+dests.String())
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	f.identity = writeFile(t, dir, "identity.txt", id.String()+"\n")
	recipients := writeFile(t, dir, "recipients.txt", id.Recipient().String()+"\n")

	cli := f.etcd.Client(t)
	endpoints := "--endpoints=" + strings.Join(f.etcd.Endpoints(), ",")
	for i := range fulls {
		writeSome(t, cli, fmt.Sprintf("/full%d", i), 20)
		f.tr.ok("save", endpoints, "--config="+f.config, "--destination=a", "--cluster=prod", "--quiet",
			"--name=n", "--recipient-file="+recipients)
	}
	for _, b := range f.list(t, "a") {
		f.revs = append(f.revs, int64(b["revision"].(float64)))
	}
	f.revs = f.revs[1:2]

	fl := startFollow(t, endpoints, "--config="+f.config, "--destination=a", "--cluster=prod",
		"--flush-interval=50ms", "--recipient-file="+recipients)
	if !assert.Eventually(t, func() bool { return strings.Contains(fl.output(), "chain of prod ") }, 30*time.Second, 20*time.Millisecond) {
		err := fl.stop(t, syscall.SIGTERM)
		t.Fatalf("follow did not start a chain: %v\n%s", err, fl.output())
	}
	for i := 0; ; i++ {
		rev := writeSome(t, cli, fmt.Sprintf("/seg%d", i), 6)
		n := waitFollowed(t, fl, rev)
		if i == segs/10 || i == segs/2 {
			f.revs = append(f.revs, rev)
		}
		if n >= segs {
			f.revs = append(f.revs, rev)
			break
		}
	}
	require.NoError(t, fl.stop(t, syscall.SIGTERM), fl.output())
	_, _, n := segments(t, f.tr, "--config="+f.config, "--destination=a", "--cluster=prod") // contiguous
	require.GreaterOrEqual(t, n, segs)
	for _, b := range f.list(t, "a") {
		if b["kind"] == "delta" {
			f.revs = append(f.revs, int64(b["firstRevision"].(float64))-1) // the chain's full
			break
		}
	}
	return f
}

// waitFollowed waits until fl reports a segment stored up to rev or past
// it, and returns the number of segments it reported.
func waitFollowed(t *testing.T, fl *follower, rev int64) int {
	t.Helper()
	var n int
	reached := func() bool {
		n = 0
		done := false
		for _, line := range strings.Split(fl.output(), "\n") {
			var first, last int64
			if _, err := fmt.Sscanf(line, "  segment %d..%d:", &first, &last); err != nil {
				continue
			}
			n++
			done = done || last >= rev
		}
		return done
	}
	if !assert.Eventually(t, reached, time.Minute, 10*time.Millisecond) {
		t.Fatalf("follow did not store revision %d:\n%s", rev, fl.output())
	}
	return n
}

func (f *copyFixture) list(t *testing.T, dest string, more ...string) []map[string]any {
	t.Helper()
	return listJSON(t, f.tr, append([]string{"--config=" + f.config, "--destination=" + dest, "--cluster=prod"}, more...)...)
}

// requireSameBackups requires dest to list exactly the backups of "a",
// recording dest as their destination, and nothing else.
func (f *copyFixture) requireSameBackups(t *testing.T, dest string) {
	t.Helper()
	want, got := f.list(t, "a"), f.list(t, dest, "--all")
	require.Len(t, got, len(want), "no duplicate, no leftover on %s", dest)
	for i := range want {
		assert.Equal(t, dest, got[i]["destination"])
		for _, field := range []string{"id", "kind", "key", "sha256", "size", "created", "firstRevision", "lastRevision", "encrypted"} {
			assert.Equal(t, want[i][field], got[i][field], "%s of %s", field, want[i]["id"])
		}
	}
}

func (f *copyFixture) copy(args ...string) []string {
	return append([]string{"copy", "--config=" + f.config, "--cluster=prod"}, args...)
}

// TestCopyCLI copies encrypted backups between two MinIO servers and a
// file destination, without the age identity; the copies verify and
// restore every revision the source does, a second copy skips them all,
// and a flipped byte in a source object is caught with nothing of that
// backup committed.
func TestCopyCLI(t *testing.T) {
	f := newCopyFixture(t, copyFulls, copySegments)
	tr := f.tr
	r := tr.ok(f.copy("--from=a", "--to=b", "--all", "--output=json")...)
	var res copyResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stdout)
	total := len(f.list(t, "a"))
	require.Equal(t, total, res.Copied, r.stdout)
	require.Len(t, res.Chains, 1)
	require.True(t, res.Chains[0].Whole)
	require.Contains(t, r.stderr, fmt.Sprintf("[%d/%d] copied ", total, total), "progress on stderr")
	f.requireSameBackups(t, "b")

	// b to the file destination c, as a second hop.
	r = tr.ok(f.copy("--from=b", "--to=c", "--all")...)
	require.Contains(t, r.stdout, fmt.Sprintf("copied %d, resumed 0, skipped 0, failed 0", total))
	f.requireSameBackups(t, "c")
	r = tr.ok(f.copy("--from=a", "--to=c", "--all")...)
	require.Contains(t, r.stdout, fmt.Sprintf("copied 0, resumed 0, skipped %d, failed 0", total), "a copy of what is there skips it")

	tr.ok("verify", "--config="+f.config, "--destination=b", "--cluster=prod", "--identity="+f.identity, "--quiet")
	tr.ok("verify", "--config="+f.config, "--destination=c", "--cluster=prod", "--identity="+f.identity, "--quiet")
	require.Len(t, f.revs, 5)
	cli := f.etcd.Client(t)
	for i, rev := range f.revs {
		dest := []string{"c", "b"}[i%2]
		requireRestored(t, tr, cli, rev, "--config="+f.config, "--destination="+dest, "--identity="+f.identity,
			fmt.Sprintf("--to-revision=%d", rev))
	}

	// A flipped byte in one of c's data objects: that backup fails, and
	// nothing of it is on d; the others are copied.
	fulls := f.list(t, "c")
	damaged := fulls[2]["id"].(string)
	path := filepath.Join(f.files["c"], filepath.FromSlash(fulls[2]["key"].(string)))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	b[len(b)/2] ^= 0x10
	require.NoError(t, os.WriteFile(path, b, 0o600))
	r = tr.fails(exitFailure, f.copy("--from=c", "--to=d", "--all", "--output=json")...)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stdout)
	require.Equal(t, 1, res.Failed, r.stdout)
	require.Equal(t, total-1, res.Copied, r.stdout)
	require.Contains(t, r.stderr, "failed "+damaged)
	for _, e := range f.list(t, "d", "--all") {
		require.NotEqual(t, damaged, e["id"])
		require.NotContains(t, e["key"], damaged)
	}
	entries, err := os.ReadDir(filepath.Join(f.files["d"], "prod"))
	require.NoError(t, err)
	for _, e := range entries {
		require.NotContains(t, e.Name(), damaged, "nothing of the damaged backup is on the target")
	}

	// Usage errors.
	tr.fails(exitUsage, f.copy("--from=a", "--to=b")...)
	tr.fails(exitUsage, f.copy("--from=a", "--to=a", "--all")...)
	tr.fails(exitUsage, f.copy("--from=a", "--to=b", "--backup=prod-nope")...)
	tr.fails(exitUsage, f.copy("--from=a", "--to=b", "--since=yesterday")...)
}

// TestCopyKilledAndRerun kills copy processes with SIGKILL at several
// steps of their commits, on a file destination and on MinIO: after
// each kill the target lists only whole backups and a chain without a
// hole; a rerun ends with exactly the source's backups, no duplicate and
// no leftover.
func TestCopyKilledAndRerun(t *testing.T) {
	bin := faultBinary(t)
	f := newCopyFixture(t, copyFullsSmall, copySegmentsSmall)
	tr := f.tr
	// Each kill comes after a few backups of the run: pass counts start
	// anew in every process, and every run goes on where the last stopped.
	steps := []string{"upload-streaming:2", "data-stored:1", "manifest-stored:3", "data-stored:4",
		"upload-streaming:5", "file-linked:5", "manifest-stored:6", "data-stored:3"}
	for _, dest := range []string{"e", "b"} {
		for _, step := range steps {
			if strings.HasPrefix(step, "file-") && dest != "e" {
				continue
			}
			runKilled(t, bin, step, f.copy("--from=a", "--to="+dest, "--all")...)
			segments(t, tr, "--config="+f.config, "--destination="+dest, "--cluster=prod") // contiguous
			for _, e := range f.list(t, dest, "--all") {
				require.Contains(t, []any{"backup", "delta", "orphan"}, e["kind"], "after a kill at %s: %v", step, e)
			}
		}
		r := tr.ok(f.copy("--from=a", "--to="+dest, "--all")...)
		require.NotContains(t, r.stdout, "copied 0, resumed 0,", "the kills left work for the rerun")
		f.requireSameBackups(t, dest)
		var kinds []string
		for _, e := range f.list(t, dest, "--all") {
			kinds = append(kinds, e["kind"].(string))
		}
		require.False(t, slices.Contains(kinds, "orphan"), "no orphan left: %v", kinds)
	}
	tr.ok("verify", "--config="+f.config, "--destination=e", "--cluster=prod", "--identity="+f.identity, "--quiet")
	requireRestored(t, tr, f.etcd.Client(t), f.revs[2], "--config="+f.config, "--destination=e",
		"--identity="+f.identity, fmt.Sprintf("--to-revision=%d", f.revs[2]))
}
