package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
)

// stallingProxy forwards TCP connections to target, and stops forwarding
// what clients send once limit bytes went through: an upload that hangs
// half way, as on a link that died.
type stallingProxy struct {
	l       net.Listener
	target  string
	limit   int64
	sent    atomic.Int64
	stalled chan struct{}
	once    sync.Once
}

func startStallingProxy(t *testing.T, target string, limit int64) *stallingProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &stallingProxy{l: l, target: target, limit: limit, stalled: make(chan struct{})}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go p.serve(t, c)
		}
	}()
	return p
}

func (p *stallingProxy) serve(t *testing.T, c net.Conn) {
	defer c.Close()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(c, up) }()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if p.sent.Add(int64(n)) > p.limit {
				p.once.Do(func() { close(p.stalled) })
				_, _ = io.Copy(io.Discard, c) // swallow the rest: the upload hangs
				return
			}
			if _, werr := up.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestSaveInterruptedExits130: SIGINT while a save's upload hangs makes
// the process exit 130, and the destination shows no backup and holds no
// object.
func TestSaveInterruptedExits130(t *testing.T) {
	etcd := etcdtest.Start(t)
	_, err := etcdtest.Fill(t.Context(), etcd.Client(t), etcdtest.FillOptions{Keys: 3000, Seed: 5})
	require.NoError(t, err)
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	proxy := startStallingProxy(t, srv.Endpoint(), 256<<10)

	cmd := exec.Command(binary(t), "save", "--endpoints="+strings.Join(etcd.Endpoints(), ","), "--cluster=prod", "--quiet",
		fmt.Sprintf("--destination=s3://%s/seed?endpoint=%s&insecure=true", bucket, proxy.l.Addr()))
	cmd.Env = append(cmd.Environ(), "AWS_ACCESS_KEY_ID="+srv.AccessKey(), "AWS_SECRET_ACCESS_KEY="+srv.SecretKey())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-proxy.stalled:
	case err := <-done:
		t.Fatalf("save ended before its upload stalled: %v\n%s", err, stderr.String())
	case <-time.After(time.Minute):
		t.Fatal("the upload never reached the stall")
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("save did not exit after SIGINT\n%s", stderr.String())
	}
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "%v", err)
	require.Equal(t, exitInterrupted, exit.ExitCode(), stderr.String())
	require.Contains(t, stderr.String(), "interrupted")

	// Nothing visible: no backup, and no object at all, straight from MinIO.
	tr := &transcript{t: t}
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey())
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey())
	require.Empty(t, listJSON(t, tr, fmt.Sprintf("--destination=s3://%s/seed?endpoint=%s&insecure=true", bucket, srv.Endpoint()), "--cluster=prod"))
	for obj := range srv.Client(t).ListObjects(t.Context(), bucket, minio.ListObjectsOptions{Recursive: true}) {
		require.NoError(t, obj.Err)
		t.Errorf("object %s left behind", obj.Key)
	}
}

// TestFollowSecondInterruptQuits: follow whose destination hangs while it
// stores its last segment says it is stopping on the first SIGINT, and a
// second SIGINT ends the process at once.
func TestFollowSecondInterruptQuits(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	// The full backup of a small etcd goes through; the segment of the
	// big values written next does not.
	proxy := startStallingProxy(t, srv.Endpoint(), 1<<20)
	cmd := exec.Command(binary(t), "follow", "--endpoints="+strings.Join(etcd.Endpoints(), ","), "--cluster=prod",
		fmt.Sprintf("--destination=s3://%s/seed?endpoint=%s&insecure=true", bucket, proxy.l.Addr()), "--flush-interval=100ms")
	cmd.Env = append(cmd.Environ(), "AWS_ACCESS_KEY_ID="+srv.AccessKey(), "AWS_SECRET_ACCESS_KEY="+srv.SecretKey())
	stderr := &syncWriter{w: &bytes.Buffer{}}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "chain of prod started") }, time.Minute, 20*time.Millisecond, "%s", stderr)
	rnd := mathrand.New(mathrand.NewPCG(1, 2))
	for i := range 8 {
		value := make([]byte, 256<<10) // random: it does not compress
		for j := range value {
			value[j] = byte(rnd.Uint32())
		}
		_, err := cli.Put(t.Context(), fmt.Sprintf("/big/%d", i), string(value))
		require.NoError(t, err)
	}
	select {
	case <-proxy.stalled:
	case err := <-done:
		t.Fatalf("follow ended: %v\n%s", err, stderr)
	case <-time.After(time.Minute):
		t.Fatalf("the segment never reached the stall\n%s", stderr)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "stopping; a second interrupt quits at once") },
		30*time.Second, 20*time.Millisecond, "%s", stderr)
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-done:
		var exit *exec.ExitError
		require.True(t, errors.As(err, &exit), "%v", err)
		require.False(t, exit.Exited(), "ended by the signal, not by an exit: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatalf("follow did not end on the second SIGINT\n%s", stderr)
	}
}
