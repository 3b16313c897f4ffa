package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/schedule"
)

const waitFor = 20 * time.Second

// TestControllerManager runs the controller-manager in-process against a
// real etcd and file destinations, on one-second schedules: backups run,
// retention keeps the newest two, drills restore the newest, /metrics shows
// it all, a change of the file
// is reconciled (a destination and a backup config added, a forbidden
// change refused, a backup config removed), and SIGTERM stops it cleanly.
func TestControllerManager(t *testing.T) {
	etcd := etcdtest.Start(t)
	_, err := etcdtest.Fill(t.Context(), etcd.Client(t), etcdtest.FillOptions{Keys: 100, Seed: 1})
	require.NoError(t, err)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	dir := t.TempDir()
	mainDir, offsiteDir := filepath.Join(dir, "main"), filepath.Join(dir, "offsite")
	require.NoError(t, os.Mkdir(mainDir, 0o700))
	require.NoError(t, os.Mkdir(offsiteDir, 0o700))
	endpoints := strings.Join(etcd.Endpoints(), ", ")
	config := filepath.Join(dir, "seed.yaml")
	write := func(destinations, configs string) {
		t.Helper()
		body := "backupRestore:\n  defaultDestination: main\n  backupDestinations:\n" + destinations + "backupConfigs:\n" + configs
		// Written aside and renamed, as a ConfigMap update is: the
		// controller never reads half a file.
		require.NoError(t, os.WriteFile(config+".new", []byte(body), 0o600))
		require.NoError(t, os.Rename(config+".new", config))
	}
	mainDest := fmt.Sprintf("    main:\n      url: file://%s\n", mainDir)
	offsiteDest := fmt.Sprintf("    offsite:\n      url: file://%s\n", offsiteDir)
	prodA := func(dest string) string {
		return fmt.Sprintf("  - {name: frequent, cluster: prod-a, endpoints: [%s], destination: %s, schedule: '@every 1s', keep: 2}\n", endpoints, dest)
	}
	prodB := fmt.Sprintf("  - {name: frequent, cluster: prod-b, endpoints: [%s], destination: offsite, schedule: '@every 1s', keep: 3}\n", endpoints)
	write(mainDest, prodA("main"))

	logs := &syncBuffer{}
	base, stopped := serveManager(t, context.Background(), config, logs, 200*time.Millisecond)
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	scrape := func() map[string]float64 {
		code, body := get("/metrics")
		require.Equal(t, http.StatusOK, code)
		return samples(t, body)
	}
	eventually := func(cond func() bool, msg string) {
		t.Helper()
		require.Eventually(t, cond, waitFor, 50*time.Millisecond, "%s\nlogs:\n%s", msg, logs)
	}

	// Backups run every second; retention keeps the newest two.
	eventually(func() bool {
		return scrape()[`etcdbackup_backup_success_total{cluster="prod-a",destination="main"}`] >= 4
	},
		"four backups of prod-a on main")
	eventually(func() bool { return countBackups(t, mainDir, "prod-a") == 2 }, "retention keeps two")
	m := scrape()
	require.Equal(t, 1.0, m[`etcdbackup_destination_available{destination="main"}`])
	require.Equal(t, 1.0, m[`etcdbackup_schedule_jobs`])
	require.Contains(t, m, `etcdbackup_schedule_last_success_timestamp_seconds{backup_job="prod-a/frequent",cluster="prod-a"}`)
	require.Contains(t, m, `etcdbackup_backup_raw_bytes{cluster="prod-a"}`)
	require.Contains(t, m, `go_goroutines`, "the host's own metrics share the registry")
	// Drills prove the newest backup restorable, while retention runs.
	eventually(func() bool {
		return scrape()[`etcdbackup_restore_drill_success_total{cluster="prod-a",destination="main"}`] >= 2
	}, "two passed drills of prod-a on main")
	require.Zero(t, scrape()[`etcdbackup_restore_drill_failures_total{cluster="prod-a",destination="main"}`], "logs:\n%s", logs)
	code, _ := get("/healthz")
	require.Equal(t, http.StatusOK, code)
	code, _ = get("/readyz")
	require.Equal(t, http.StatusOK, code)

	// A destination and a backup config are added.
	write(mainDest+offsiteDest, prodA("main")+prodB)
	eventually(func() bool {
		return scrape()[`etcdbackup_backup_success_total{cluster="prod-b",destination="offsite"}`] >= 1
	},
		"a backup of prod-b on offsite")
	require.Equal(t, 2.0, scrape()[`etcdbackup_schedule_jobs`])
	require.Positive(t, countBackups(t, offsiteDir, "prod-b"))

	// Moving prod-a's backups to another destination is refused: its
	// earlier backups live on main. The job goes on as it was.
	write(mainDest+offsiteDest, prodA("offsite")+prodB)
	eventually(func() bool { code, _ := get("/readyz"); return code == http.StatusServiceUnavailable }, "not ready")
	_, body := get("/readyz")
	require.Contains(t, body, "backup config prod-a/frequent")
	require.Contains(t, body, destination.ErrDestinationChanged.Error())
	before := scrape()[`etcdbackup_backup_success_total{cluster="prod-a",destination="main"}`]
	eventually(func() bool {
		return scrape()[`etcdbackup_backup_success_total{cluster="prod-a",destination="main"}`] > before
	}, "prod-a still backed up to main")
	require.Zero(t, countBackups(t, offsiteDir, "prod-a"))

	// A broken file changes nothing either.
	write(mainDest+offsiteDest+"  unknownField: 1\n", prodB)
	eventually(func() bool {
		code, body := get("/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "unknownField")
	}, "a file with an unknown field is refused")
	require.Equal(t, 2.0, scrape()[`etcdbackup_schedule_jobs`])

	// prod-a's config is deleted: its job goes, with its series.
	write(mainDest+offsiteDest, prodB)
	eventually(func() bool { code, _ := get("/readyz"); return code == http.StatusOK }, "ready again")
	m = scrape()
	require.Equal(t, 1.0, m[`etcdbackup_schedule_jobs`])
	require.NotContains(t, m, `etcdbackup_schedule_consecutive_failures{backup_job="prod-a/frequent",cluster="prod-a"}`)
	require.Contains(t, m, `etcdbackup_schedule_consecutive_failures{backup_job="prod-b/frequent",cluster="prod-b"}`)

	// SIGTERM: the scheduler stops gracefully and run returns nil.
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case err := <-stopped:
		require.NoError(t, err, "logs:\n%s", logs)
	case <-time.After(waitFor):
		t.Fatalf("did not stop on SIGTERM\n%s", logs)
	}
	require.Contains(t, logs.String(), "controller-manager stopped")
	_, err = http.Get(base + "/healthz")
	require.Error(t, err, "the server is closed")
}

// TestStartWithBadConfig checks that a configuration that cannot be
// applied at start fails run, which is the process's exit 1.
func TestStartWithBadConfig(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"unknown field":      "backupRestore:\n  backupDestination: {}\n",
		"credentials in url": "backupRestore:\n  backupDestinations:\n    main: {url: 's3://KEY:SECRET@bucket/x'}\n",
		"overlap":            "backupRestore:\n  defaultDestination: a\n  backupDestinations:\n    a: {url: 'file:///tmp/x'}\n    b: {url: 'file:///tmp/x/y'}\n",
		"legacy conflict":    "backupRestore:\n  s3BucketName: b\n  backupDestinations:\n    default: {url: 's3://other'}\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
			require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
			err := run(t.Context(), options{config: path, listen: "127.0.0.1:0", poll: time.Second, logger: slog.New(slog.DiscardHandler)})
			require.Error(t, err)
			require.NotContains(t, err.Error(), "SECRET")
		})
	}
}

// TestConfigMapping checks how the seed-like file maps onto the library:
// the deprecated fields become the destination "default", credentials
// references are kept as references, backup configs become jobs.
func TestConfigMapping(t *testing.T) {
	cfg, err := parseConfig([]byte(`
backupRestore:
  s3Endpoint: minio.backups.svc:9000
  s3BucketName: etcd-backups
  s3Credentials: {source: files, accessKeyFile: /s/a, secretKeyFile: /s/b}
  backupDestinations:
    main:
      url: s3://seed-eu/backups?endpoint=127.0.0.1:9000
      credentials: {source: secret, secret: kube-system/main, revision: "42"}
      caFile: /etc/minio-ca.pem
backupConfigs:
  - {name: legacy, cluster: old, endpoints: [10.0.0.1:2379]}
  - {name: hourly, cluster: prod, endpoints: [10.0.0.2:2379], destination: main, schedule: '@hourly', keep: 5,
     tls: {caFile: /ca.pem}}
`))
	require.NoError(t, err)
	desired, err := cfg.desired()
	require.NoError(t, err)
	require.Equal(t, destination.DefaultName, desired.Default, "the legacy destination is the default when none is named")
	require.Len(t, desired.Destinations, 2)
	legacy := desired.Destinations[1]
	require.Equal(t, destination.Spec{Name: "default", Endpoint: "minio.backups.svc:9000", Bucket: "etcd-backups",
		Credentials: destination.Credentials{Source: destination.SourceFiles, AccessKeyFile: "/s/a", SecretKeyFile: "/s/b"}}, legacy)
	require.Equal(t, destination.Credentials{Source: destination.SourceSecret, Secret: "kube-system/main", Revision: "42"}, desired.Destinations[0].Credentials)
	require.Equal(t, "/etc/minio-ca.pem", desired.Destinations[0].CACertFile)

	reg, err := destination.NewRegistry(destination.Options{Secrets: mountedSecrets(t.TempDir()), CredentialSources: destination.AnySource()})
	require.NoError(t, err)
	defer reg.Close()
	_, err = reg.Apply(t.Context(), desired)
	require.NoError(t, err)
	old, hourly := cfg.BackupConfigs[0], cfg.BackupConfigs[1]
	valid, err := reg.ValidateBackupConfig(old.libraryConfig(), nil)
	require.NoError(t, err)
	require.Equal(t, "default", valid.Destination, "a config without destination uses the default")
	job := old.job(valid)
	require.True(t, job.OneShot())
	require.NoError(t, job.Validate())

	valid, err = reg.ValidateBackupConfig(hourly.libraryConfig(), nil)
	require.NoError(t, err)
	job = hourly.job(valid)
	require.Equal(t, "prod/hourly", job.ID)
	require.Equal(t, []string{"main"}, job.Destinations)
	require.Equal(t, 5, job.Retention.KeepLast)
	require.Equal(t, backup.Zstd, job.Compression)
	require.Equal(t, "/ca.pem", hourly.etcd().TLS.TrustedCAFile)

	kinds, err := parseConfig([]byte(`
backupConfigs:
  - {name: ns, cluster: prod, endpoints: [10.0.0.2:2379], schedule: '@daily', type: keys-json, prefixes: [/registry/namespaces/]}
  - {name: pitr, cluster: prod, endpoints: [10.0.0.2:2379], schedule: '@daily', pointInTimeWindow: 72h, compactInterval: 1h}
  - {name: bad, cluster: prod, endpoints: [10.0.0.2:2379], schedule: '@hourly', type: tarball, pointInTimeWindow: soon}
  - {name: zip, cluster: prod, endpoints: [10.0.0.2:2379], schedule: '@daily', type: keys, prefixes: [/registry/secrets/]}
`))
	require.NoError(t, err)
	ns, pitr, bad, zip := kinds.BackupConfigs[0], kinds.BackupConfigs[1], kinds.BackupConfigs[2], kinds.BackupConfigs[3]
	job = zip.job(destination.BackupConfig{Name: "zip", Cluster: "prod", Destination: "main", Schedule: "@daily"})
	require.Equal(t, backup.KindKeys, job.Kind)
	require.Equal(t, []string{"/registry/secrets/"}, job.Prefixes)
	require.NoError(t, errors.Join(zip.checkKind(), job.Validate()))
	job = ns.job(destination.BackupConfig{Name: "ns", Cluster: "prod", Destination: "main", Schedule: "@daily"})
	require.Equal(t, backup.KindKeysJSON, job.Kind)
	require.Equal(t, []string{"/registry/namespaces/"}, job.Prefixes)
	require.NoError(t, job.Validate())
	job = pitr.job(destination.BackupConfig{Name: "pitr", Cluster: "prod", Destination: "main", Schedule: "@daily"})
	require.Equal(t, &schedule.Continuous{Window: 72 * time.Hour, CompactInterval: time.Hour}, job.Continuous)
	require.NoError(t, job.Validate())
	require.NoError(t, errors.Join(ns.checkKind(), pitr.checkKind()))
	require.ErrorContains(t, bad.checkKind(), `type "tarball"`)
	bad.Type = ""
	require.ErrorContains(t, bad.checkKind(), "pointInTimeWindow")
	bad.PointInTimeWindow, bad.CompactInterval = "", "1h"
	require.ErrorContains(t, bad.checkKind(), "compactInterval needs a pointInTimeWindow")

	_, err = parseConfig([]byte("backupConfigs:\n  - {name: a, cluster: c}\n  - {name: a, cluster: c}\n"))
	require.ErrorContains(t, err, "twice")
}

// TestMountedSecrets reads keys from a Secret mounted as files, and
// refuses names that leave the directory.
func TestMountedSecrets(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "kube-system", "main"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kube-system", "main", "accessKeyID"), []byte("AKID\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kube-system", "main", "secretAccessKey"), []byte("s3cr3t\n"), 0o600))
	r := mountedSecrets(dir)
	creds, err := r.ResolveSecret(t.Context(), "main", "kube-system/main")
	require.NoError(t, err)
	v, err := creds.GetWithContext(nil)
	require.NoError(t, err)
	require.Equal(t, "AKID", v.AccessKeyID)
	require.Equal(t, "s3cr3t", v.SecretAccessKey)

	_, err = r.ResolveSecret(t.Context(), "main", "../etc")
	require.ErrorContains(t, err, "not a relative path")
	_, err = r.ResolveSecret(t.Context(), "main", "kube-system/other")
	require.ErrorContains(t, err, "accessKeyID")
	_, err = mountedSecrets("").ResolveSecret(t.Context(), "main", "kube-system/main")
	require.ErrorContains(t, err, "--secrets-dir")
}

// countBackups counts the backups (with manifests) of cluster in a file
// destination's directory.
func countBackups(t *testing.T, dir, cluster string) int {
	t.Helper()
	reg, err := destination.NewRegistry(destination.Options{})
	require.NoError(t, err)
	defer reg.Close()
	d, err := reg.Add(t.Context(), destination.Spec{Name: "count", URL: "file://" + dir})
	require.NoError(t, err)
	entries, err := backup.ListBackups(t.Context(), d, cluster)
	require.NoError(t, err)
	n := 0
	for _, e := range entries {
		if e.Kind == backup.KindBackup {
			n++
		}
	}
	return n
}

// samples parses the text exposition into series and values.
func samples(t *testing.T, body string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		out[line[:i]] = v
	}
	return out
}

// syncBuffer is a bytes.Buffer the controller's goroutines may log to
// while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestExampleConfig keeps the configuration shipped beside the example
// valid: every destination and backup config is accepted.
func TestExampleConfig(t *testing.T) {
	raw, err := os.ReadFile("seed.yaml")
	require.NoError(t, err)
	cfg, err := parseConfig(raw)
	require.NoError(t, err)
	desired, err := cfg.desired()
	require.NoError(t, err)
	reg, err := destination.NewRegistry(destination.Options{})
	require.NoError(t, err)
	defer reg.Close()
	_, err = reg.Apply(t.Context(), desired)
	require.NoError(t, err)
	require.NotEmpty(t, cfg.BackupConfigs)
	for _, bc := range cfg.BackupConfigs {
		valid, err := reg.ValidateBackupConfig(bc.libraryConfig(), nil)
		require.NoError(t, err, bc.id())
		job := bc.job(valid)
		require.NoError(t, job.Validate(), bc.id())
		require.NoError(t, bc.etcd().Validate(), bc.id())
	}
}
