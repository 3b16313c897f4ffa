package retention_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// The crash test runs a backup in a child process (this test binary, told
// so by crashChildEnv) and kills it with SIGKILL mid-upload.
const crashChildEnv = "ETCDBACKUP_CRASH_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		os.Exit(crashChild())
	}
	os.Exit(m.Run())
}

// slowStream yields a valid 64 MiB snapshot stream at a few MiB a second,
// so that the parent can kill the child while parts are being uploaded.
type slowStream struct {
	body   []byte
	off    int
	sum    [32]byte
	trailN int
}

func (s *slowStream) Read(p []byte) (int, error) {
	if s.off < len(s.body) {
		time.Sleep(20 * time.Millisecond)
		n := copy(p[:min(len(p), 64<<10)], s.body[s.off:])
		s.off += n
		return n, nil
	}
	if s.trailN < len(s.sum) {
		n := copy(p, s.sum[s.trailN:])
		s.trailN += n
		return n, nil
	}
	return 0, io.EOF
}

type slowSnapshotter struct{}

func (slowSnapshotter) Snapshot(ctx context.Context) (*backup.Snapshot, error) {
	body := bytes.Repeat([]byte("etcd bbolt page "), 64<<20/16)
	s := &slowStream{body: body, sum: sha256.Sum256(body)}
	return backup.NewSnapshot(io.NopCloser(s), backup.SnapshotInfo{}, nil), nil
}

func crashChild() int {
	b, err := s3.New(s3.Options{
		Endpoint: os.Getenv("CRASH_ENDPOINT"), Bucket: os.Getenv("CRASH_BUCKET"), Region: "us-east-1", Insecure: true,
		BucketLookup: s3.LookupPath, Credentials: s3.StaticCredentials(os.Getenv("CRASH_ACCESS"), os.Getenv("CRASH_SECRET"), ""),
		PartSize: 5 << 20, PartsInFlight: 2,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	p := &backup.Pipeline{Snapshotter: slowSnapshotter{}, Compression: backup.None}
	_, err = p.Run(context.Background(), backup.Request{Cluster: "prod-a", Name: "crash",
		Targets: []backup.Target{{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: b}}}})
	fmt.Fprintln(os.Stderr, "child finished before it was killed:", err)
	return 3
}

// TestKilledBackupLeavesNothingVisible kills a backup process mid-upload:
// no backup becomes visible, and the next retention run aborts the
// multipart upload it left.
func TestKilledBackupLeavesNothingVisible(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	b, err := s3.New(srv.S3Options(bucket))
	require.NoError(t, err)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"=1", "CRASH_ENDPOINT="+srv.Endpoint(), "CRASH_BUCKET="+bucket,
		"CRASH_ACCESS="+srv.AccessKey(), "CRASH_SECRET="+srv.SecretKey())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())

	// Wait until the child has stored parts of a multipart upload.
	require.Eventually(t, func() bool {
		uploads, err := srv.IncompleteUploads(t.Context(), bucket)
		return err == nil && len(uploads) > 0
	}, 30*time.Second, 50*time.Millisecond, "the child never started a multipart upload: %s", &stderr)
	time.Sleep(300 * time.Millisecond) // a part or two more
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.NotContains(t, stderr.String(), "child finished", "the child must die mid-upload")

	entries, err := backup.ListBackups(t.Context(), b, "prod-a")
	require.NoError(t, err)
	require.Empty(t, entries, "no backup, orphan or manifest is visible")
	uploads, err := srv.IncompleteUploads(t.Context(), bucket)
	require.NoError(t, err)
	require.NotEmpty(t, uploads, "the killed upload is left unfinished")

	// Within the grace period retention leaves the upload alone: it may be
	// a backup still running.
	p := &retention.Pruner{Store: b, Destination: "minio"}
	report, err := p.Prune(t.Context(), "prod-a")
	require.NoError(t, err)
	require.Empty(t, report.AbortedUploads)

	// An object written after the kill shows how far the store's clock
	// has gone: a pruner whose clock runs past the grace period does not
	// collect the upload on its clock alone.
	require.NoError(t, b.Put(t.Context(), "prod-a/written-after-the-kill", bytes.NewReader([]byte("x")), nil))
	p.Now = func() time.Time { return time.Now().Add(retention.DefaultUploadGrace + time.Minute) }
	report, err = p.Prune(t.Context(), "prod-a")
	require.NoError(t, err)
	require.Empty(t, report.AbortedUploads)

	// Past a grace period by both clocks, the next run collects it.
	p.Now, p.UploadGrace = nil, 300*time.Millisecond
	report, err = p.Prune(t.Context(), "prod-a")
	require.NoError(t, err)
	require.Len(t, report.AbortedUploads, len(uploads))
	uploads, err = srv.IncompleteUploads(t.Context(), bucket)
	require.NoError(t, err)
	require.Empty(t, uploads)
}
