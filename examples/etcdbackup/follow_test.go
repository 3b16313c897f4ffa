package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
)

var (
	binaryOnce sync.Once
	binaryDir  string
	binaryPath string
	binaryErr  error
)

// TestMain removes the command built for the tests once they ran.
func TestMain(m *testing.M) {
	code := m.Run()
	if binaryDir != "" {
		_ = os.RemoveAll(binaryDir)
	}
	os.Exit(code)
}

// binary builds the command once per test run.
func binary(t *testing.T) string {
	t.Helper()
	binaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "etcdbackup-bin-")
		if err != nil {
			binaryErr = err
			return
		}
		binaryDir, binaryPath = dir, filepath.Join(dir, "etcdbackup")
		out, err := exec.Command("go", "build", "-o", binaryPath, ".").CombinedOutput()
		if err != nil {
			binaryErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, binaryErr)
	return binaryPath
}

// follower is the follow command running as a process of its own.
type follower struct {
	cmd    *exec.Cmd
	stderr *syncWriter
	done   chan error
}

// output is what the follower printed to stderr so far.
func (f *follower) output() string {
	return f.stderr.String()
}

func startFollow(t *testing.T, args ...string) *follower {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"follow"}, args...)...)
	f := &follower{cmd: cmd, stderr: &syncWriter{w: &bytes.Buffer{}}, done: make(chan error, 1)}
	cmd.Stderr = f.stderr
	require.NoError(t, cmd.Start())
	go func() { f.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-f.done
	})
	return f
}

// stop sends sig and waits for the exit.
func (f *follower) stop(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	require.NoError(t, f.cmd.Process.Signal(sig))
	select {
	case err := <-f.done:
		f.done <- err // for the cleanup
		return err
	case <-time.After(time.Minute):
		t.Fatalf("follower did not exit after %v", sig)
		return nil
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

// String returns what was written so far.
func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// segments lists the cluster's delta segments, checks that they are
// contiguous, and returns the last revision they reach.
func segments(t *testing.T, tr *transcript, args ...string) (first, last int64, n int) {
	t.Helper()
	for _, b := range listJSON(t, tr, args...) {
		if b["kind"] != "delta" {
			require.Equal(t, "backup", b["kind"])
			continue
		}
		f, l := int64(b["firstRevision"].(float64)), int64(b["lastRevision"].(float64))
		require.LessOrEqual(t, f, l)
		if n > 0 {
			require.Equal(t, last+1, f, "segment %s follows the previous one: no gap, no double", b["id"])
		} else {
			first = f
		}
		last = l
		n++
	}
	return first, last, n
}

// waitSegments waits until the segments reach rev.
func waitSegments(t *testing.T, tr *transcript, rev int64, args ...string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, last, _ := segments(t, tr, args...); last >= rev {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("segments do not reach revision %d", rev)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// writeSome puts, overwrites and deletes keys, and returns the last
// revision.
func writeSome(t *testing.T, cli *clientv3.Client, prefix string, n int) int64 {
	t.Helper()
	var rev int64
	for i := range n {
		var err error
		var hdr int64
		if i%5 == 4 {
			resp, derr := cli.Delete(t.Context(), fmt.Sprintf("%s/%d", prefix, i-2))
			err, hdr = derr, 0
			if derr == nil {
				hdr = resp.Header.Revision
			}
		} else {
			resp, perr := cli.Put(t.Context(), fmt.Sprintf("%s/%d", prefix, i%7), fmt.Sprintf("v%d", i))
			err = perr
			if perr == nil {
				hdr = resp.Header.Revision
			}
		}
		require.NoError(t, err)
		rev = max(rev, hdr)
	}
	return rev
}

// putReceived puts key under a new lease and waits until the follower
// received the put, and with it every revision before: the follower asks
// etcd for the TTL of a lease it meets for the first time, while it adds
// the revision to its open segment, before it reads the watch again. The
// embedded etcd counts the lookups it answered. It returns the put's
// revision.
func putReceived(t *testing.T, cli *clientv3.Client, key string) int64 {
	t.Helper()
	lease, err := cli.Grant(t.Context(), 3600)
	require.NoError(t, err)
	before := leaseLookups(t)
	resp, err := cli.Put(t.Context(), key, "v", clientv3.WithLease(lease.ID))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return leaseLookups(t) > before }, 30*time.Second, 20*time.Millisecond,
		"the follower never received revision %d", resp.Header.Revision)
	return resp.Header.Revision
}

// leaseLookups is how many LeaseTimeToLive calls the etcd servers of this
// process answered (etcd's gRPC metrics, on the default registry).
func leaseLookups(t *testing.T) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "grpc_server_handled_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "grpc_method" && l.GetValue() == "LeaseTimeToLive" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// requireRestored restores with the CLI and flags, which select rev, starts
// etcd on it and compares it with the source at rev.
func requireRestored(t *testing.T, tr *transcript, source *clientv3.Client, rev int64, flags ...string) {
	t.Helper()
	dataDir := filepath.Join(t.TempDir(), "restored")
	r := tr.ok(append([]string{"restore", "--cluster=prod", "--data-dir=" + dataDir, "--name=restored",
		"--initial-advertise-peer-urls=http://127.0.0.1:2380", "--quiet"}, flags...)...)
	require.Contains(t, r.stdout, fmt.Sprintf("restored revision %d into %s", rev, dataDir))
	srv := etcdtest.Start(t, etcdtest.WithDataDir(dataDir), etcdtest.WithName("restored"))
	defer srv.Stop()
	got, err := srv.Client(t).Get(t.Context(), "", clientv3.WithPrefix())
	require.NoError(t, err)
	want, err := source.Get(t.Context(), "", clientv3.WithPrefix(), clientv3.WithRev(rev))
	require.NoError(t, err)
	require.Equal(t, rev, got.Header.Revision)
	require.Equal(t, len(want.Kvs), len(got.Kvs))
	for i := range want.Kvs {
		w, g := want.Kvs[i], got.Kvs[i]
		require.Equal(t, []any{string(w.Key), string(w.Value), w.CreateRevision, w.ModRevision, w.Version},
			[]any{string(g.Key), string(g.Value), g.CreateRevision, g.ModRevision, g.Version})
	}
}

// TestFollowCLI runs `etcdbackup follow` as a process against a real etcd
// and MinIO: it takes a full backup first, stores contiguous segments,
// commits what it holds on SIGTERM and exits 0; `list --output=json` shows
// the segments; `restore --to-revision` restores a revision; SIGKILL in
// the middle of a segment and a restart leave no gap and no double.
func TestFollowCLI(t *testing.T) {
	tr := &transcript{t: t}
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	writeSome(t, cli, "/before", 10)
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	dest := "--destination=" + fmt.Sprintf("s3://%s/seed?endpoint=%s&insecure=true", bucket, srv.Endpoint())
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey())
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey())
	base := []string{"--endpoints=" + strings.Join(etcd.Endpoints(), ","), dest, "--cluster=prod"}

	// A long flush interval: what the follower holds at SIGTERM is stored
	// by the final commit alone.
	f := startFollow(t, append(base, "--flush-interval=1m")...)
	require.Eventually(t, func() bool { return strings.Contains(f.output(), "chain of prod started") }, 30*time.Second, 20*time.Millisecond)
	writeSome(t, cli, "/a", 40)
	// Nothing is due before a minute: the follower holds what it received.
	mid := putReceived(t, cli, "/a/last")
	atMid := time.Now()
	require.NoError(t, f.stop(t, syscall.SIGTERM), "exit 0 after SIGTERM\n%s", f.output())
	require.Contains(t, f.output(), "chain of prod started after full backup prod-full-")
	var fullRev int64
	for _, b := range listJSON(t, tr, dest, "--cluster=prod") {
		if b["kind"] == "backup" {
			fullRev = int64(b["revision"].(float64))
		}
	}
	require.NotZero(t, fullRev)
	first, reached, n := segments(t, tr, dest, "--cluster=prod")
	require.Equal(t, fullRev+1, first, "the chain starts after the full backup")
	require.Equal(t, mid, reached, "everything the follower held at SIGTERM was committed")
	require.Equal(t, 1, n)

	// SIGKILL while a segment is open (a flush interval of a minute holds
	// the writes in memory), then a restart: the chain goes on from the
	// last committed revision, without a gap or a double.
	f = startFollow(t, append(base, "--flush-interval=1m")...)
	require.Eventually(t, func() bool { return strings.Contains(f.output(), "resumed at revision") }, 30*time.Second, 20*time.Millisecond)
	writeSome(t, cli, "/c", 30)
	held := putReceived(t, cli, "/c/last") // held in the open segment
	require.Error(t, f.stop(t, syscall.SIGKILL))
	require.NotContains(t, f.output(), "  segment ", "nothing was committed before the kill")
	_, reached, _ = segments(t, tr, dest, "--cluster=prod")
	require.Equal(t, mid, reached, "the held revisions up to %d died with the process", held)
	args := append(base, "--flush-interval=300ms")
	after := writeSome(t, cli, "/d", 30)
	f = startFollow(t, args...)
	waitSegments(t, tr, after, dest, "--cluster=prod")
	require.NoError(t, f.stop(t, syscall.SIGTERM))
	require.Contains(t, f.output(), "resumed at revision")
	_, reached, n = segments(t, tr, dest, "--cluster=prod")
	require.Equal(t, after, reached)
	for _, b := range listJSON(t, tr, dest, "--cluster=prod", "--all") {
		require.Contains(t, []string{"backup", "delta", "orphan"}, b["kind"], "nothing invalid after SIGKILL: %v", b)
	}
	require.GreaterOrEqual(t, n, 2)

	for _, rev := range []int64{fullRev, mid, after} {
		requireRestored(t, tr, cli, rev, dest, fmt.Sprintf("--to-revision=%d", rev))
	}
	// By time: the last revision received before atMid is mid.
	requireRestored(t, tr, cli, mid, dest, "--to-time="+atMid.UTC().Format(time.RFC3339Nano))
	// A revision past the chain's end lies in a gap: refused with the
	// missing revisions, unless the nearest earlier point is asked for.
	past := fmt.Sprintf("--to-revision=%d", after+1000)
	r := tr.fails(exitFailure, "restore", dest, "--cluster=prod", "--data-dir="+t.TempDir(), past)
	require.Contains(t, r.stderr, fmt.Sprintf("revisions %d to %d are missing", after+1, after+1000))
	requireRestored(t, tr, cli, after, dest, past, "--nearest-earlier")
	tr.fails(exitUsage, "restore", dest, "--cluster=prod", "--data-dir="+t.TempDir(), "--nearest-earlier")
	// --to-revision and --backup exclude each other.
	tr.fails(exitUsage, "restore", dest, "--cluster=prod", "--data-dir="+t.TempDir(), "--backup=latest", "--to-revision=5")
	tr.fails(exitUsage, "restore", dest, "--cluster=prod", "--data-dir="+t.TempDir(), "--to-time=yesterday")
}
