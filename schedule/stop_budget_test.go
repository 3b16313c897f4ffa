package schedule

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/faultproxy"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// The stop budget test runs a scheduler in a child process (this test
// binary, running stopChild from TestMain, told so by stopChildEnv).
const stopChildEnv = "ETCDBACKUP_STOP_CHILD"

const (
	stopBudget = 6 * time.Second
	// stopMargin is what the child may take past its budget to exit: the
	// process's own exit on a busy machine. The race detector's second of
	// sleep at exit (GORACE's atexit_sleep_ms) is turned off in the child.
	stopMargin = 4 * time.Second
)

// TestStopWithinBudget runs a scheduler in a process with a continuous
// backup and a one-shot run, both stalled on a destination that holds
// every request (MinIO behind a fault proxy), and sends it SIGTERM: the
// follower's last segment, the run's cancellation and the cleanup of its
// upload, and the release of the locks all fit in StopTimeout, and the
// process exits within it (before, the last segment alone waited for the
// follower's 30 seconds of FinalCommitTimeout). What the process leaves,
// stopped at the end of its budget or killed there, shows only complete
// backups, and the follower's chain has no gap.
func TestStopWithinBudget(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := newEtcdClient(t, srv)
	defer cli.Close()
	minio := miniotest.Start(t)
	bucketName := minio.NewBucket(t, miniotest.BucketOptions{})
	proxy := faultproxy.StartHTTP(t, minio.Endpoint())
	direct, err := s3.New(minio.S3Options(bucketName))
	require.NoError(t, err)
	put(t, cli, 20)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), stopChildEnv+"=1",
		"STOP_ETCD="+strings.Join(srv.Endpoints(), ","), "STOP_S3="+proxy.Addr(), "STOP_BUCKET="+bucketName,
		"STOP_ACCESS="+minio.AccessKey(), "STOP_SECRET="+minio.SecretKey(), "STOP_BUDGET="+stopBudget.String(),
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	stdin, err := child.StdinPipe()
	require.NoError(t, err)
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	child.Stderr = &stderr
	require.NoError(t, child.Start())
	exited := make(chan error, 1)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- child.Wait()
	}()
	t.Cleanup(func() {
		_ = child.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("child's log:\n%s", stderr.String())
		}
	})
	var seen []string
	waitLine := func(want string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				require.True(t, ok, "the child ended before %q: %v", want, seen)
				seen = append(seen, l)
				if l == want {
					return
				}
			case <-timeout:
				t.Fatalf("the child never said %q: %v", want, seen)
			}
		}
	}

	// The follower committed a segment; then the destination stalls,
	// while the follower holds revisions and a one-shot run uploads.
	waitLine("following")
	put(t, cli, 5)
	eventually(t, func() bool { time.Sleep(50 * time.Millisecond); return lastRevision(t, direct, "prod-a") > 0 }, "a segment committed")
	proxy.SetRules(faultproxy.Rule{Name: "stall", Action: faultproxy.Delay, Delay: 10 * time.Minute})
	put(t, cli, 5)
	eventually(t, func() bool { return proxy.Fired()["stall"] >= 1 }, "the follower's store stalled")
	_, err = io.WriteString(stdin, "run\n")
	require.NoError(t, err)
	waitLine("running")
	eventually(t, func() bool { return proxy.Fired()["stall"] >= 2 }, "the run's upload stalled")

	sent := time.Now()
	require.NoError(t, child.Process.Signal(syscall.SIGTERM))
	select {
	case <-exited:
		for l := range lines { // closed before exited is sent
			seen = append(seen, l)
		}
		t.Logf("exited %v after SIGTERM (budget %v); the child said %q", time.Since(sent).Round(10*time.Millisecond), stopBudget, seen[len(seen)-1])
		exited <- nil // for the cleanup
	case <-time.After(stopBudget + stopMargin):
		_ = child.Process.Kill() // killed at the budget's end: what it leaves is checked below
		t.Errorf("the process did not exit within its stop budget of %v (+%v)", stopBudget, stopMargin)
	}
	proxy.SetRules()

	// Only complete items are visible: no backup of the cancelled run,
	// and a chain of segments with no gap from its full backup.
	all, err := restore.List(t.Context(), []restore.Source{{Name: "minio", Catalog: direct}}, "prod-a")
	require.NoError(t, err)
	for _, b := range all {
		if b.Manifest != nil {
			assert.NotEqual(t, "once", b.Manifest.Name, "the cancelled run's backup %s is visible", b.ID)
		}
		assert.NotEqual(t, backup.KindInvalid, b.Kind, "entry %s", b.ID)
	}
	full, segments := chainOf(t, direct, "prod-a")
	last := segments[len(segments)-1].LastRevision
	plan, err := restore.FindPoint(t.Context(), []restore.Source{{Name: "minio", Catalog: direct}},
		restore.Point{Cluster: "prod-a", Revision: last})
	require.NoError(t, err)
	assert.Equal(t, full.ID, plan.Full.ID)
}

// TestMain runs the child process of TestStopWithinBudget when
// stopChildEnv says so, and the package's tests otherwise.
func TestMain(m *testing.M) {
	if os.Getenv(stopChildEnv) != "" {
		os.Exit(stopChild())
	}
	os.Exit(m.Run())
}

// stopChild is the child process of TestStopWithinBudget: it runs a
// scheduler with a continuous job until SIGTERM, sets a one-shot job when
// it reads "run", and says "following" and "running" when they are.

func stopChild() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	budget, err := time.ParseDuration(os.Getenv("STOP_BUDGET"))
	if err != nil {
		return fail(err)
	}
	b, err := s3.New(s3.Options{Endpoint: os.Getenv("STOP_S3"), Bucket: os.Getenv("STOP_BUCKET"), Region: "us-east-1",
		Insecure: true, BucketLookup: s3.LookupPath, Credentials: s3.StaticCredentials(os.Getenv("STOP_ACCESS"), os.Getenv("STOP_SECRET"), "")})
	if err != nil {
		return fail(err)
	}
	endpoints := strings.Split(os.Getenv("STOP_ETCD"), ",")
	snap, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: endpoints})
	if err != nil {
		return fail(err)
	}
	lockClient, err := snap.Client(context.Background())
	if err != nil {
		return fail(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	runner := &PipelineRunner{
		Snapshotter: func(context.Context, string) (backup.Snapshotter, error) { return snap, nil },
		Uploader:    func(context.Context, string) (backup.Uploader, error) { return &backup.BucketUploader{Bucket: b}, nil },
		Store:       func(context.Context, string) (retention.Store, error) { return b, nil },
		Logger:      log,
	}
	s, err := New(Config{Runner: runner, Lock: &EtcdLock{Client: lockClient, Prefix: "/locks/"}, StopTimeout: budget, Logger: log})
	if err != nil {
		return fail(err)
	}
	follow := Job{ID: "ns/follow", Schedule: "@every 24h", Cluster: "prod-a", Name: "daily", Destinations: []string{"minio"},
		Continuous: &Continuous{Window: time.Hour, FlushInterval: 100 * time.Millisecond}}
	once := Job{ID: "ns/once", Cluster: "prod-a", Name: "once", Destinations: []string{"minio"}}
	if err := s.Set(follow); err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if sc.Text() == "run" {
				if err := s.Set(once); err != nil {
					fmt.Fprintln(os.Stderr, "child:", err)
				}
			}
		}
	}()
	go func() {
		said := map[string]bool{}
		for ctx.Err() == nil {
			if st, ok := s.Get(follow.ID); ok && st.Status.Following && !said["following"] {
				said["following"] = true
				fmt.Println("following")
			}
			if st, ok := s.Get(once.ID); ok && st.Status.Running && !said["running"] {
				said["running"] = true
				fmt.Println("running")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	// When Start returned, measured from the signal in this process: a
	// slow exit after it is not the scheduler's.
	signalled := make(chan time.Time, 1)
	go func() { <-ctx.Done(); signalled <- time.Now() }()
	if err := s.Start(ctx); err != nil {
		return fail(err)
	}
	fmt.Printf("stopped %v after the signal\n", time.Since(<-signalled).Round(time.Millisecond))
	return 0
}
