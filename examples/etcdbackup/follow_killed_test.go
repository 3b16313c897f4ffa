package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/faultpoint"
)

// TestFollowKilledAtEachStoreStep kills follow with SIGKILL at each step
// of its first segment's store on file:// (where its data object may be
// named before the sync that makes it and its manifest durable). After
// each kill nothing lists as an invalid backup, the full backups listed
// verify and the segments listed are contiguous; a follow started again
// resumes the chain (or starts one) without a gap or a double, and the
// newest revision restores.
func TestFollowKilledAtEachStoreStep(t *testing.T) {
	bin := faultBinary(t)
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	writeSome(t, cli, "/before", 10)
	// The full backup passes each file step twice (data, manifest): the
	// first segment's steps are the third and fourth passes.
	var steps []string
	for _, s := range []string{"file-data-written", "file-linked", "file-attrs-renamed", "file-data-synced", "file-attrs-synced", "file-dir-synced"} {
		steps = append(steps, s+":3", s+":4")
	}
	steps = append(steps, "data-stored:1", "manifest-stored:1")
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			tr := &transcript{t: t}
			dest := "--destination=file://" + t.TempDir()
			base := []string{"--endpoints=" + strings.Join(etcd.Endpoints(), ","), dest, "--cluster=prod", "--flush-interval=100ms"}
			followKilled(t, bin, step, cli, base)
			for _, b := range listJSON(t, tr, dest, "--cluster=prod", "--all") {
				require.Contains(t, []string{"backup", "delta", "orphan"}, b["kind"], "a leftover of the kill lists as %v", b)
				if b["kind"] == "backup" {
					tr.ok("verify", dest, "--cluster=prod", "--backup="+b["id"].(string), "--quiet")
				}
			}
			segments(t, tr, dest, "--cluster=prod") // contiguous

			f := startFollow(t, base...)
			require.Eventually(t, func() bool {
				out := f.output()
				return strings.Contains(out, "chain of prod started") || strings.Contains(out, "resumed at revision")
			}, 30*time.Second, 20*time.Millisecond, "follow did not start again")
			after := writeSome(t, cli, "/after", 5)
			waitSegments(t, tr, after, dest, "--cluster=prod")
			require.NoError(t, f.stop(t, syscall.SIGTERM), f.output())
			_, reached, _ := segments(t, tr, dest, "--cluster=prod")
			require.Equal(t, after, reached)
			requireRestored(t, tr, cli, after, dest, fmt.Sprintf("--to-revision=%d", after))
		})
	}
}

// followKilled runs follow with the fault point step set, writing to etcd
// until it dies, and requires that it died of SIGKILL there (within a
// minute).
func followKilled(t *testing.T, bin, step string, cli *clientv3.Client, args []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"follow"}, args...)...)
	cmd.Env = append(os.Environ(), faultpoint.Variable+"="+step)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	for i := 0; ; i++ {
		select {
		case err = <-done:
		case <-time.After(20 * time.Millisecond):
			_, perr := cli.Put(t.Context(), fmt.Sprintf("/w/%d", i%50), "v")
			require.NoError(t, perr)
			continue
		}
		break
	}
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "follow was not killed at %s: %v\n%s", step, err, out.String())
	ws, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL && ctx.Err() == nil,
		"follow was not killed at %s: %v\n%s", step, err, out.String())
}
