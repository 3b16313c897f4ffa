package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
)

// TestDelete: delete removes one backup of the cluster named; it refuses
// a backup under object lock (which stays), a read-only destination (exit
// 2) and an ID of another cluster.
func TestDelete(t *testing.T) {
	tr := &transcript{t: t}
	dir := t.TempDir()
	etcd := etcdtest.Start(t)
	_, err := etcd.Client(t).Put(t.Context(), "/registry/k", "v")
	require.NoError(t, err)
	endpoints := "--endpoints=" + strings.Join(etcd.Endpoints(), ",")
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{ObjectLocking: true})
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey())
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey())
	url := fmt.Sprintf("s3://%s/seed?endpoint=%s&insecure=true", bucket, srv.Endpoint())
	dest := "--destination=" + url

	var ids []string
	for range 3 {
		ids = append(ids, tr.ok("save", endpoints, dest, "--cluster=prod", "--quiet").lastLine())
	}
	tr.ok("save", endpoints, dest, "--cluster=other", "--quiet")

	r := tr.ok("delete", dest, "--cluster=prod", "--backup="+ids[0], "--dry-run")
	require.Contains(t, r.stdout, "would-delete "+ids[0])
	require.Len(t, listJSON(t, tr, dest, "--cluster=prod"), 3, "a dry run deletes nothing")
	r = tr.ok("delete", dest, "--cluster=prod", "--backup="+ids[0])
	require.Contains(t, r.stdout, "deleted "+ids[0])
	require.Len(t, listJSON(t, tr, dest, "--cluster=prod"), 2)

	tr.fails(exitFailure, "delete", dest, "--cluster=other", "--backup="+ids[1])
	tr.fails(exitFailure, "delete", dest, "--cluster=prod", "--backup="+ids[0])
	require.Len(t, listJSON(t, tr, dest, "--cluster=prod"), 2, "nothing of another cluster, nothing twice")

	// Lock the second backup's objects: delete refuses, and it stays.
	mc := srv.Client(t)
	until := time.Now().Add(time.Hour)
	mode := minio.Governance
	for obj := range mc.ListObjects(t.Context(), bucket, minio.ListObjectsOptions{Prefix: "seed/prod/", Recursive: true}) {
		require.NoError(t, obj.Err)
		if strings.Contains(obj.Key, ids[1]) {
			require.NoError(t, mc.PutObjectRetention(t.Context(), bucket, obj.Key, minio.PutObjectRetentionOptions{Mode: &mode, RetainUntilDate: &until}))
		}
	}
	r = tr.fails(exitFailure, "delete", dest, "--cluster=prod", "--backup="+ids[1])
	require.Contains(t, r.stderr, "object lock")
	require.Len(t, listJSON(t, tr, dest, "--cluster=prod"), 2)

	config := writeFile(t, dir, "ro.yaml", fmt.Sprintf("default: main\ndestinations:\n  main:\n    url: %s\n    readOnly: true\n", url))
	tr.fails(exitUsage, "delete", "--config="+config, "--cluster=prod", "--backup="+ids[2])
	require.Len(t, listJSON(t, tr, dest, "--cluster=prod"), 2)
}
