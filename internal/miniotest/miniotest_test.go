package miniotest_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/miniotest"
)

func TestIncompleteUploadsSeesAndForgetsAnUpload(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	ctx := t.Context()

	uploads, err := srv.IncompleteUploads(ctx, bucket)
	require.NoError(t, err)
	require.Empty(t, uploads)

	core := minio.Core{Client: srv.Client(t)}
	const key = "nested/dir/object"
	id, err := core.NewMultipartUpload(ctx, bucket, key, minio.PutObjectOptions{})
	require.NoError(t, err)
	part := bytes.Repeat([]byte("x"), 1024)
	_, err = core.PutObjectPart(ctx, bucket, key, id, 1, bytes.NewReader(part), int64(len(part)), minio.PutObjectPartOptions{})
	require.NoError(t, err)

	uploads, err = srv.IncompleteUploads(ctx, bucket)
	require.NoError(t, err)
	require.Len(t, uploads, 1)
	assert.Equal(t, key, uploads[0].Key)
	assert.Equal(t, id, uploads[0].ID)
	assert.WithinDuration(t, time.Now(), uploads[0].Initiated, time.Minute)

	require.NoError(t, core.AbortMultipartUpload(ctx, bucket, key, id))
	uploads, err = srv.IncompleteUploads(ctx, bucket)
	require.NoError(t, err)
	assert.Empty(t, uploads)
}

func TestIncompleteUploadsPagesThroughManyUploads(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	ctx := t.Context()
	core := minio.Core{Client: srv.Client(t)}

	// Two uploads under one key and several keys, more than MinIO's
	// smallest page would hold if it paged early.
	want := map[string]bool{}
	for i, key := range []string{"a", "a", "b/c", "d/e/f", "z"} {
		id, err := core.NewMultipartUpload(ctx, bucket, key, minio.PutObjectOptions{})
		require.NoError(t, err, "upload %d", i)
		want[key+" "+id] = true
	}
	uploads, err := srv.IncompleteUploads(ctx, bucket)
	require.NoError(t, err)
	got := map[string]bool{}
	for _, u := range uploads {
		got[u.Key+" "+u.ID] = true
	}
	assert.Equal(t, want, got)
}

func TestIncompleteUploadsOfMissingBucketFails(t *testing.T) {
	srv := miniotest.Start(t)
	_, err := srv.IncompleteUploads(t.Context(), "no-such-bucket")
	require.Error(t, err)
}

func TestStopRestartKeepsBucketsAndObjects(t *testing.T) {
	srv := miniotest.Start(t)
	plain := srv.NewBucket(t, miniotest.BucketOptions{})
	locked := srv.NewBucket(t, miniotest.BucketOptions{ObjectLocking: true})
	require.NotEqual(t, plain, locked)
	ctx := t.Context()
	client := srv.Client(t)
	_, err := client.PutObject(ctx, plain, "k", bytes.NewReader([]byte("hello")), 5, minio.PutObjectOptions{})
	require.NoError(t, err)
	endpoint := srv.Endpoint()

	srv.Stop(t)
	_, err = net.DialTimeout("tcp", endpoint, time.Second)
	require.Error(t, err, "nothing listens while stopped")
	shortCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = client.BucketExists(shortCtx, plain)
	require.Error(t, err, "requests fail while stopped")

	srv.Restart(t)
	assert.Equal(t, endpoint, srv.Endpoint())
	client = srv.Client(t)
	for _, b := range []string{plain, locked} {
		ok, err := client.BucketExists(ctx, b)
		require.NoError(t, err)
		assert.True(t, ok, b)
	}
	lock, _, _, _, err := client.GetObjectLockConfig(ctx, locked)
	require.NoError(t, err)
	assert.Equal(t, "Enabled", lock)
	obj, err := client.GetObject(ctx, plain, "k", minio.GetObjectOptions{})
	require.NoError(t, err)
	data := new(bytes.Buffer)
	_, err = data.ReadFrom(obj)
	require.NoError(t, err)
	assert.Equal(t, "hello", data.String())
}

func TestBucketNamesAreUnique(t *testing.T) {
	srv := miniotest.Start(t)
	seen := map[string]bool{}
	for range 5 {
		name := srv.NewBucket(t, miniotest.BucketOptions{})
		assert.False(t, seen[name], name)
		seen[name] = true
	}
	assert.NotEmpty(t, srv.AccessKey())
	assert.NotEmpty(t, srv.SecretKey())
	assert.NotEqual(t, srv.AccessKey(), srv.SecretKey())
}

// recordingTB stands in for a test, recording how Start gives up.
type recordingTB struct {
	testing.TB
	fatal   string
	logs    []string
	skipped bool
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recordingTB) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

func (r *recordingTB) Skip(...any)          { r.skipped = true; runtime.Goexit() }
func (r *recordingTB) Skipf(string, ...any) { r.skipped = true; runtime.Goexit() }
func (r *recordingTB) SkipNow()             { r.skipped = true; runtime.Goexit() }

// Without the binary an integration test fails, saying how to install it;
// it never skips.
func TestMissingBinaryFailsWithInstructions(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-minio-here")
	t.Setenv(miniotest.BinEnv, missing)
	rec := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		miniotest.Start(rec)
		t.Error("Start returned without a binary")
	}()
	<-done
	assert.False(t, rec.skipped, "skipped instead of failing")
	assert.Contains(t, rec.fatal, "make tools")
	assert.Contains(t, rec.fatal, missing)
}

// A server that cannot start fails the test and shows what it printed.
func TestFailedStartShowsServerOutput(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "minio")
	script := "#!/bin/sh\necho 'minio: cannot start: disk on fire' >&2\nexit 1\n"
	require.NoError(t, os.WriteFile(bin, []byte(script), 0o755))
	t.Setenv(miniotest.BinEnv, bin)
	rec := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		miniotest.Start(rec)
		t.Error("Start returned although the server exited")
	}()
	<-done
	assert.Contains(t, rec.fatal, "exited before it was ready")
	require.NotEmpty(t, rec.logs)
	assert.Contains(t, strings.Join(rec.logs, "\n"), "disk on fire")
}
