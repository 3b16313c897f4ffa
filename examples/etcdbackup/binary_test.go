package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
)

// runBinary runs the built CLI as a user does, with env added to this
// process' environment, and returns its exit code and outputs.
func runBinary(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// TestBinaryCommands drives the new commands and flags through the built
// binary: version, environment variables instead of flags, a fan-out with
// one destination down, prune --gfs with JSON output, delete, and the exit
// codes of each.
func TestBinaryCommands(t *testing.T) {
	etcd := etcdtest.Start(t)
	_, err := etcd.Client(t).Put(t.Context(), "/registry/k", "v")
	require.NoError(t, err)
	srv := miniotest.Start(t)
	up := fmt.Sprintf("s3://%s/seed?endpoint=%s&insecure=true", srv.NewBucket(t, miniotest.BucketOptions{}), srv.Endpoint())
	down := "s3://gone/seed?endpoint=127.0.0.1:1&insecure=true"
	env := []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey(), "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey(),
		"ETCDCTL_ENDPOINTS=" + strings.Join(etcd.Endpoints(), ","), "ETCDBACKUP_CLUSTER=prod", "XDG_CONFIG_HOME=" + t.TempDir()}

	code, out, errOut := runBinary(t, env, "version", "--output=json")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `"etcdClient":"v3.`)

	// The endpoints from etcdctl's variable, the cluster from ours.
	code, out, errOut = runBinary(t, env, "save", "--destination="+down, "--destination="+up, "--quiet")
	require.Equal(t, exitFailure, code, errOut)
	require.Contains(t, errOut, "destination "+targetLabel(down)+": failed")
	id := strings.TrimSpace(out)
	require.Contains(t, errOut, "destination "+targetLabel(up)+": stored "+id)
	code, _, errOut = runBinary(t, env, "verify", "--destination="+up, "--backup="+id)
	require.Equal(t, exitOK, code, errOut)

	code, _, errOut = runBinary(t, env, "save", "--destination="+up, "--quiet")
	require.Equal(t, exitOK, code, errOut)
	code, out, errOut = runBinary(t, env, "prune", "--destination="+up, "--gfs=days=1", "--dry-run", "--output=json")
	require.Equal(t, exitOK, code, errOut)
	var report struct{ Items []pruneItem }
	require.NoError(t, json.Unmarshal([]byte(out), &report), out)
	require.Len(t, report.Items, 2)

	code, out, errOut = runBinary(t, env, "delete", "--destination="+up, "--backup="+id)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "deleted "+id)
	code, _, _ = runBinary(t, env, "delete", "--destination="+up, "--backup="+id)
	require.Equal(t, exitFailure, code, "gone already")
	code, _, errOut = runBinary(t, env, "prune", "--destination="+up)
	require.Equal(t, exitUsage, code, "no rule says what to keep: %s", errOut)
	code, _, _ = runBinary(t, append(env, "ETCDBACKUP_MEMORY=lots"), "save", "--destination="+up)
	require.Equal(t, exitUsage, code)
}
