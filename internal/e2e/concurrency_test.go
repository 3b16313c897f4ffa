package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// concurrencyRounds is how many times each scenario runs in a row.
const concurrencyRounds = 20

// TestConcurrentProcesses runs etcdbackup processes against one
// destination at once, as cron jobs, operators and controllers do, on a
// file and an S3 (MinIO) destination: several saves of one cluster; a
// prune beside a save; a restore of the newest beside a prune; a save
// killed at a random moment beside another. After each, every save that
// exited 0 is listed and passes a restore drill, nothing is half-visible,
// and another cluster's objects are untouched.
func TestConcurrentProcesses(t *testing.T) {
	cli := buildCLI(t)
	etcd := etcdtest.Start(t)
	c := etcd.Client(t)
	for i := range 200 {
		_, err := c.Put(t.Context(), fmt.Sprintf("/registry/configmaps/k%03d", i), strings.Repeat("v", 512))
		require.NoError(t, err)
	}
	srv := miniotest.Start(t)

	fileDir := t.TempDir()
	fileBucket, err := blob.Open(t.Context(), drivers.NewURLMux(nil), "file://"+fileDir, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = fileBucket.Close() })

	s3Name := srv.NewBucket(t, miniotest.BucketOptions{})
	s3Bucket, err := s3.New(srv.S3Options(s3Name))
	require.NoError(t, err)
	seed, err := storage.WithPrefix(s3Bucket, "seed")
	require.NoError(t, err)

	env := append(os.Environ(), "AWS_ACCESS_KEY_ID="+srv.AccessKey(), "AWS_SECRET_ACCESS_KEY="+srv.SecretKey())
	for _, d := range []struct {
		name, url string
		bucket    storage.Bucket
	}{
		{"file", "file://" + fileDir, fileBucket},
		{"minio", fmt.Sprintf("s3://%s/seed?endpoint=%s&insecure=true&region=us-east-1", s3Name, srv.Endpoint()), seed},
	} {
		t.Run(d.name, func(t *testing.T) {
			h := &harness{t: t, cli: cli, env: env, url: d.url, bucket: d.bucket, endpoints: etcd.Endpoints()[0], orphans: map[string]bool{}}
			h.mustSave("prod-b", "daily") // the other cluster, which nothing may touch
			other := h.objects("prod-b/")
			for round := range concurrencyRounds {
				h.round = round
				h.severalSaves()
				h.pruneBesideSave()
				h.restoreBesidePrune()
				h.killedSaveBesideSave()
				require.Equal(t, other, h.objects("prod-b/"), "round %d: another cluster's objects changed", round)
			}
		})
	}
}

// harness runs the CLI against one destination.
type harness struct {
	t         *testing.T
	cli       string
	env       []string
	url       string
	bucket    storage.Bucket
	endpoints string
	round     int
	// orphans are data objects killed saves left, which stay as orphans
	// until retention collects them.
	orphans map[string]bool
}

// proc is a CLI process under way.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan struct{}
	err            error
}

func (h *harness) start(args ...string) *proc {
	p := &proc{cmd: exec.Command(h.cli, args...), done: make(chan struct{})}
	p.cmd.Env = h.env
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	require.NoError(h.t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p
}

func (p *proc) wait() error {
	<-p.done
	return p.err
}

// id is the backup ID a save printed as its last line.
func (p *proc) id() string {
	lines := strings.Split(strings.TrimSpace(p.stdout.String()), "\n")
	return lines[len(lines)-1]
}

func (h *harness) save(cluster, name string) *proc {
	return h.start("save", "--endpoints="+h.endpoints, "--destination="+h.url, "--cluster="+cluster, "--name="+name, "--quiet")
}

func (h *harness) mustSave(cluster, name string) string {
	p := h.save(cluster, name)
	require.NoError(h.t, p.wait(), "save: %s", p.stderr.String())
	return p.id()
}

// severalSaves starts three saves of one cluster at once.
func (h *harness) severalSaves() {
	procs := []*proc{h.save("prod-a", "hourly"), h.save("prod-a", "hourly"), h.save("prod-a", "hourly")}
	h.check("several saves", procs, false)
}

// pruneBesideSave prunes to one backup while a save uploads.
func (h *harness) pruneBesideSave() {
	s := h.save("prod-a", "hourly")
	p := h.start("prune", "--destination="+h.url, "--cluster=prod-a", "--keep=1")
	require.NoError(h.t, p.wait(), "round %d: prune: %s", h.round, p.stderr.String())
	h.check("prune beside a save", []*proc{s}, false)
}

// restoreBesidePrune restores the newest backup while a prune runs.
func (h *harness) restoreBesidePrune() {
	dataDir := filepath.Join(h.t.TempDir(), "restored")
	r := h.start("restore", "--destination="+h.url, "--cluster=prod-a", "--data-dir="+dataDir)
	p := h.start("prune", "--destination="+h.url, "--cluster=prod-a", "--keep=1")
	require.NoError(h.t, p.wait(), "round %d: prune: %s", h.round, p.stderr.String())
	require.NoError(h.t, r.wait(), "round %d: restore of the newest beside a prune: %s", h.round, r.stderr.String())
	_, err := os.Stat(filepath.Join(dataDir, "member", "snap", "db"))
	require.NoError(h.t, err, "round %d: the restored member has a database", h.round)
	h.check("restore beside a prune", nil, false)
}

// killedSaveBesideSave kills one save with SIGKILL at a random moment while
// another runs to its end.
func (h *harness) killedSaveBesideSave() {
	victim := h.save("prod-a", "hourly")
	survivor := h.save("prod-a", "hourly")
	time.Sleep(time.Duration(rand.IntN(400)) * time.Millisecond)
	_ = victim.cmd.Process.Signal(syscall.SIGKILL)
	_ = victim.wait()
	h.check("a save killed beside a save", []*proc{survivor}, true)
}

// check waits for the saves, then holds the invariants: every save that
// exited 0 is listed and passes a drill, every listed backup is whole
// (no manifest without its data), and only a killed run may leave an
// orphan data object.
func (h *harness) check(scenario string, saves []*proc, killed bool) {
	t := h.t
	var ok []string
	for _, p := range saves {
		if err := p.wait(); err == nil {
			ok = append(ok, p.id())
		} else {
			// A save may lose a race for its ID; it then says so.
			require.Contains(t, p.stderr.String(), backup.ErrBackupExists.Error(), "round %d, %s: a save failed otherwise", h.round, scenario)
		}
	}
	if len(saves) > 0 {
		require.NotEmpty(t, ok, "round %d, %s: no save succeeded", h.round, scenario)
	}
	entries, err := backup.ListBackups(t.Context(), h.bucket, "prod-a")
	require.NoError(t, err)
	listed := map[string]backup.Entry{}
	for _, e := range entries {
		switch {
		case e.Kind == backup.KindBackup:
			listed[e.ID] = e
		case e.Kind == backup.KindOrphan && killed:
			h.orphans[e.Key] = true
		case e.Kind == backup.KindOrphan && h.orphans[e.Key]:
		default:
			t.Fatalf("round %d, %s: %s is visible as %s", h.round, scenario, e.Key, e.Kind)
		}
	}
	sources := []restore.Source{{Name: "d", Catalog: h.bucket}}
	restorer := &restore.Restorer{TempDir: t.TempDir()}
	for _, id := range ok {
		_, found := listed[id]
		require.True(t, found, "round %d, %s: save exited 0 with %s, which is not listed", h.round, scenario, id)
		b, err := restore.Find(t.Context(), sources, restore.Query{Cluster: "prod-a", ID: id})
		require.NoError(t, err)
		res, err := restorer.Drill(t.Context(), b)
		require.NoError(t, err, "round %d, %s: drill of %s", h.round, scenario, id)
		require.True(t, res.Passed())
	}
}

// objects returns the key, size and ETag of every object under prefix.
func (h *harness) objects(prefix string) []string {
	var out []string
	for info, err := range h.bucket.List(h.t.Context(), prefix) {
		require.NoError(h.t, err)
		out = append(out, fmt.Sprintf("%s %d %s", info.Key, info.Size, info.ETag))
	}
	require.NotEmpty(h.t, out)
	return out
}

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// buildCLI builds examples/etcdbackup once per test binary, with the race
// detector, so that the processes run as users run them and races in them
// still show.
func buildCLI(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		dir, err := os.MkdirTemp("", "etcdbackup-cli-")
		if err != nil {
			cliErr = err
			return
		}
		cliPath = filepath.Join(dir, "etcdbackup")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-race", "-o", cliPath, "github.com/etcdbackup/etcdbackup/examples/etcdbackup").CombinedOutput()
		if err != nil {
			cliErr = fmt.Errorf("build the CLI: %w\n%s", err, out)
		}
	})
	require.NoError(t, cliErr)
	return cliPath
}
