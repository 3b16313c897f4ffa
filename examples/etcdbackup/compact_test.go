package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
)

// syntheticFulls returns the synthetic full backups list --output=json
// shows.
func syntheticFulls(t *testing.T, tr *transcript, args ...string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, b := range listJSON(t, tr, args...) {
		if b["synthetic"] == true {
			require.Equal(t, "backup", b["kind"])
			out = append(out, b)
		}
	}
	return out
}

// TestCompactCLI follows a real etcd into MinIO with `follow`, kills
// `compact` with SIGKILL after its data object is stored and while it
// streams (nothing visible after either, the chain intact), then compacts
// the chain to its last committed revision while follow goes on: compact
// prints the new backup's ID last, list --output=json shows it as a
// synthetic full backup at that revision, and restore --to-revision gives
// the source's state before, at and after it.
func TestCompactCLI(t *testing.T) {
	tr := &transcript{t: t}
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	writeSome(t, cli, "/before", 10)
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	dest := "--destination=" + fmt.Sprintf("s3://%s/seed?endpoint=%s&insecure=true", bucket, srv.Endpoint())
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey())
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey())

	f := startFollow(t, "--endpoints="+strings.Join(etcd.Endpoints(), ","), dest, "--cluster=prod", "--flush-interval=300ms")
	require.Eventually(t, func() bool { return strings.Contains(f.output(), "chain of prod started") }, 30*time.Second, 20*time.Millisecond)
	var fullRev int64
	for _, b := range listJSON(t, tr, dest, "--cluster=prod") {
		if b["kind"] == "backup" {
			fullRev = int64(b["revision"].(float64))
		}
	}
	early := writeSome(t, cli, "/a", 20)
	at := writeSome(t, cli, "/b", 20)
	waitSegments(t, tr, at, dest, "--cluster=prod")

	bin := faultBinary(t)
	for _, step := range []string{"upload-streaming", "data-stored"} {
		runKilled(t, bin, step, "compact", dest, "--cluster=prod", "--quiet")
		require.Empty(t, syntheticFulls(t, tr, dest, "--cluster=prod"), "killed at %s: nothing visible", step)
		for _, b := range listJSON(t, tr, dest, "--cluster=prod", "--all") {
			require.Contains(t, []any{"backup", "delta", "orphan"}, b["kind"], "killed at %s: %v", step, b)
		}
		first, last, _ := segments(t, tr, dest, "--cluster=prod")
		require.Equal(t, fullRev+1, first, "killed at %s: the chain is intact", step)
		require.GreaterOrEqual(t, last, at)
	}

	r := tr.ok("compact", dest, "--cluster=prod", fmt.Sprintf("--to-revision=%d", at), "--quiet")
	id := r.lastLine()
	synthetic := syntheticFulls(t, tr, dest, "--cluster=prod")
	require.Len(t, synthetic, 1)
	require.Equal(t, id, synthetic[0]["id"], "compact prints the new backup's ID last")
	require.Equal(t, float64(at), synthetic[0]["revision"])
	tr.ok("verify", dest, "--cluster=prod", "--backup="+id, "--quiet")

	after := writeSome(t, cli, "/c", 20)
	waitSegments(t, tr, after, dest, "--cluster=prod")
	require.NoError(t, f.stop(t, syscall.SIGTERM))
	// Compacting again to the default, the last committed revision,
	// starts from the synthetic full backup.
	r = tr.ok("compact", dest, "--cluster=prod", "--output=json", "--quiet")
	require.Contains(t, r.stdout, fmt.Sprintf(`"base":%q`, id))
	require.Contains(t, r.stdout, fmt.Sprintf(`"revision":%d`, after))

	for _, rev := range []int64{fullRev, early, at, at + 3, after} {
		requireRestored(t, tr, cli, rev, dest, fmt.Sprintf("--to-revision=%d", rev))
	}
	tr.fails(exitFailure, "compact", dest, "--cluster=prod", fmt.Sprintf("--to-revision=%d", after))
}
