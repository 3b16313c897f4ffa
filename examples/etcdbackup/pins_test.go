package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/faultproxy"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage"
)

// TestRestoreBesideAPruneInAnotherProcess: pins live in one process. A
// prune run by another process after a restore chose a backup, and before
// it downloads it, deletes that backup: the restore then fails with exit
// 1, says the object is not found, and leaves no data directory. It never
// restores another backup instead.
func TestRestoreBesideAPruneInAnotherProcess(t *testing.T) {
	etcd := etcdtest.Start(t)
	_, err := etcd.Client(t).Put(t.Context(), "/registry/k", "v")
	require.NoError(t, err)
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	proxy := faultproxy.StartHTTP(t, srv.Endpoint())
	direct := fmt.Sprintf("--destination=s3://%s/seed?endpoint=%s&insecure=true", bucket, srv.Endpoint())
	viaProxy := fmt.Sprintf("--destination=s3://%s/seed?endpoint=%s&insecure=true", bucket, proxy.Addr())
	env := []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey(), "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey(),
		"ETCDCTL_ENDPOINTS=" + strings.Join(etcd.Endpoints(), ","), "ETCDBACKUP_CLUSTER=prod", "XDG_CONFIG_HOME=" + t.TempDir()}
	var ids []string
	for range 2 {
		code, out, errOut := runBinary(t, env, "save", direct, "--quiet")
		require.Equal(t, exitOK, code, errOut)
		ids = append(ids, strings.TrimSpace(out))
	}
	older := ids[0]

	// The restore's first read of the older backup's data object waits
	// for a prune, in a process of its own, that keeps the newest only.
	var pruneCode int
	var pruneOut string
	proxy.SetRules(faultproxy.Rule{
		Name:  "prune first",
		Times: 1,
		Match: func(r *http.Request) bool {
			return r.Method == http.MethodGet && strings.Contains(r.URL.Path, older) && !strings.HasSuffix(r.URL.Path, backup.ManifestSuffix)
		},
		Before: func() {
			var errOut string
			pruneCode, pruneOut, errOut = runBinary(t, env, "prune", direct, "--keep-last=1")
			pruneOut += errOut
		},
	})
	dataDir := filepath.Join(t.TempDir(), "member")
	code, out, errOut := runBinary(t, env, "restore", viaProxy, "--backup="+older, "--data-dir="+dataDir)
	require.Equal(t, 1, proxy.Fired()["prune first"], "the restore read the chosen backup's data: %s%s", out, errOut)
	require.Equal(t, exitOK, pruneCode, pruneOut)
	t.Logf("restore beside the prune: exit %d: %s", code, errOut)
	require.Equal(t, exitFailure, code, out+errOut)
	require.Contains(t, errOut, storage.ErrNotFound.Error())
	require.NotContains(t, out, ids[1], "no other backup is restored instead")
	_, err = os.Stat(dataDir)
	require.ErrorIs(t, err, os.ErrNotExist, "no data directory is left")
}
