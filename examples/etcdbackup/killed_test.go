package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/faultpoint"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
)

// faultBinary builds the command with fault points (the
// etcdbackup_faultpoints tag) into a directory of the test's.
func faultBinary(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "etcdbackup-faultpoints")
	out, err := exec.Command("go", "build", "-tags", "etcdbackup_faultpoints", "-o", path, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return path
}

// runKilled runs the command with the fault point step set (and this
// process's environment) and requires
// that it died of SIGKILL there.
func runKilled(t *testing.T, bin, step string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), faultpoint.Variable+"="+step)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "the command was not killed at %s: %v\n%s", step, err, stderr.String())
	ws, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the command was not killed at %s: %v\n%s", step, err, stderr.String())
}

// requireCrashConsistent checks the rule of a commit killed at any step:
// list shows either nothing or one complete backup, which verifies, and
// nothing the destination holds lists as an invalid backup. It returns
// whether a backup is visible.
func requireCrashConsistent(t *testing.T, tr *transcript, dest string) bool {
	t.Helper()
	listed := listJSON(t, tr, "--destination="+dest, "--cluster=prod")
	require.LessOrEqual(t, len(listed), 1, "%v", listed)
	for _, e := range listed {
		require.Equal(t, "backup", e["kind"], "%v", e)
		tr.ok("verify", "--destination="+dest, "--cluster=prod", "--backup="+e["id"].(string), "--quiet")
	}
	for _, e := range listJSON(t, tr, "--destination="+dest, "--cluster=prod", "--all") {
		assert.Contains(t, []any{"backup", "orphan"}, e["kind"], "a leftover of the killed commit lists as %v", e)
	}
	return len(listed) == 1
}

// TestSaveKilledAtEachCommitStep kills save with SIGKILL at each step of
// its commit, on file:// and on MinIO. After each kill, list and verify
// agree: no backup is visible, or one is and it verifies; none is half
// visible. A next save then succeeds beside whatever the kill left.
func TestSaveKilledAtEachCommitStep(t *testing.T) {
	bin := faultBinary(t)
	etcd := etcdtest.Start(t)
	_, err := etcdtest.Fill(t.Context(), etcd.Client(t), etcdtest.FillOptions{Keys: 500, Seed: 7})
	require.NoError(t, err)
	endpoints := "--endpoints=" + strings.Join(etcd.Endpoints(), ",")

	// On file:// each put passes the file steps: the data object first
	// (":1"), then the manifest (":2").
	type step struct {
		name    string
		visible bool // the backup is committed when the kill comes
	}
	var fileSteps []step
	for _, s := range []string{"file-data-written", "file-data-synced", "file-attrs-synced", "file-linked", "file-attrs-renamed", "file-dir-synced"} {
		fileSteps = append(fileSteps, step{s + ":1", false}, step{s + ":2", s == "file-linked" || s == "file-attrs-renamed" || s == "file-dir-synced"})
	}
	uploaderSteps := []step{{"upload-streaming", false}, {"data-stored", false}, {"manifest-stored", true}}

	run := func(t *testing.T, steps []step, newDest func(t *testing.T) string) {
		for _, s := range steps {
			t.Run(s.name, func(t *testing.T) {
				tr := &transcript{t: t}
				dest := newDest(t)
				runKilled(t, bin, s.name, "save", endpoints, "--cluster=prod", "--quiet", "--destination="+dest)
				visible := requireCrashConsistent(t, tr, dest)
				require.Equal(t, s.visible, visible, "a backup visible after a kill at %s", s.name)

				tr.ok("save", endpoints, "--cluster=prod", "--quiet", "--destination="+dest)
				want := 1
				if visible {
					want = 2
				}
				require.Len(t, listJSON(t, tr, "--destination="+dest, "--cluster=prod"), want)
			})
		}
	}
	t.Run("file", func(t *testing.T) {
		run(t, append(fileSteps, uploaderSteps...), func(t *testing.T) string { return "file://" + t.TempDir() })
	})
	t.Run("minio", func(t *testing.T) {
		srv := miniotest.Start(t)
		t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey())
		t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey())
		run(t, uploaderSteps, func(t *testing.T) string {
			return fmt.Sprintf("s3://%s/seed?endpoint=%s&insecure=true", srv.NewBucket(t, miniotest.BucketOptions{}), srv.Endpoint())
		})
	})
}
