package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
)

// The CLI modes run the etcdbackup command as shipped (`make release`:
// examples/etcdbackup built with -trimpath -tags disable_grpc_modules
// -ldflags='-s -w'), a process of its own, at its defaults: what an
// operator runs. Their figures are
// the CLI's, not the library's in the bench's binaries.
//
// The mode's process (the lean binary for backups) starts the CLI and
// waits for it. The CLI's peak RSS is its ru_maxrss: Linux carries into
// it the high-water mark of the memory the CLI's process had before
// execve, which a child started by os/exec shares with this process, so
// the figure holds only when it is above this process' own VmHWM, which
// runCLI checks. When it is not (a CLI smaller than the bench binary that
// starts it: the import), the peak is the CLI's VmHWM as last sampled
// from /proc, every anonSampleEvery, before it ended (what it reached in
// its last moments is missed), and the result says so. Its wall time
// includes the process' start and exit; its anonymous peak is sampled
// the same way.

// cliPeakMargin is how far above the starting process' own peak a CLI's
// ru_maxrss must be to be taken as the CLI's: the starting process may
// gain a few pages between the reading of its peak and the CLI's execve.
const cliPeakMargin = 1 << 20

// cliDestination is the CLI's URL of env's bucket; the credentials go in
// its environment.
func cliDestination(env modeEnv) string {
	q := url.Values{"endpoint": {env.S3}, "insecure": {"true"}, "region": {"us-east-1"}, "pathStyle": {"true"}}
	if env.CAFile != "" {
		q.Del("insecure")
	}
	return "s3://" + env.Bucket + "?" + q.Encode()
}

// cliStore returns the CLI's flags naming env's bucket: the URL, or over
// HTTPS a config file (written to env.TmpDir) that names the URL and the
// CA, as an operator's would.
func cliStore(env modeEnv) ([]string, error) {
	if env.CAFile == "" {
		return []string{"--destination=" + cliDestination(env)}, nil
	}
	path := filepath.Join(env.TmpDir, env.Name+"-config.yaml")
	config := fmt.Sprintf("default: store\ndestinations:\n  store:\n    url: %s\n    caFile: %s\n", cliDestination(env), env.CAFile)
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return nil, err
	}
	return []string{"--config=" + path}, nil
}

// runCLISave is `etcdbackup save` at its defaults (zstd, --memory=32MiB).
func runCLISave(ctx context.Context, env modeEnv) (modeResult, error) {
	return runCLISaveWith(ctx, env)
}

// runCLISaveMem0 is `etcdbackup save --memory=0`: the library's defaults.
func runCLISaveMem0(ctx context.Context, env modeEnv) (modeResult, error) {
	return runCLISaveWith(ctx, env, "--memory=0")
}

func runCLISaveWith(ctx context.Context, env modeEnv, extra ...string) (modeResult, error) {
	store, err := cliStore(env)
	if err != nil {
		return modeResult{}, err
	}
	args := append([]string{"save", "--endpoints=" + env.Etcd}, store...)
	args = append(args, "--cluster=bench", "--name="+env.Name, "--quiet")
	return runCLIBackup(ctx, env, append(args, extra...)...)
}

// runCLIExport is `etcdbackup export` of every key at its defaults.
func runCLIExport(ctx context.Context, env modeEnv) (modeResult, error) {
	store, err := cliStore(env)
	if err != nil {
		return modeResult{}, err
	}
	args := append([]string{"export", "--endpoints=" + env.Etcd}, store...)
	return runCLIBackup(ctx, env, append(args, "--cluster=bench", "--name="+env.Name, "--quiet")...)
}

// runCLIIdle is `etcdbackup version`: the CLI's floor. Its wall time is
// not reported, as the idle row's is not.
func runCLIIdle(ctx context.Context, env modeEnv) (modeResult, error) {
	res, _, err := runCLI(ctx, env, "version")
	res.Wall = 0
	return res, err
}

// runCLIBackup runs a CLI command that stores a backup and prints its ID
// as its last line, and reads the backup's manifest for its sizes.
func runCLIBackup(ctx context.Context, env modeEnv, args ...string) (modeResult, error) {
	res, out, err := runCLI(ctx, env, args...)
	if err != nil {
		return modeResult{}, err
	}
	id := lastLine(out)
	m, err := findManifest(ctx, env, id)
	if err != nil {
		return modeResult{}, err
	}
	res.ID, res.Key = m.ID, backup.ClusterPrefix(m.Cluster)+m.DataKey
	res.Raw, res.Stored = m.Raw.Size, m.Stored.Size
	return res, nil
}

// runCLI runs env.CLI with args and measures it; it returns its standard
// output.
func runCLI(ctx context.Context, env modeEnv, args ...string) (modeResult, string, error) {
	if env.CLI == "" {
		return modeResult{}, "", errors.New("no CLI binary: give -cli PATH (make bench builds it as make release does)")
	}
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, env.CLI, args...)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+env.Access, "AWS_SECRET_ACCESS_KEY="+env.Secret, "GOMEMLIMIT=")
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// The child's ru_maxrss starts at this process' peak RSS: Linux
	// records it at exec from the memory the child shared with it until
	// then. So this process gives back what it can and restarts its peak
	// from its current RSS first, or a CLI smaller than the modes run in
	// it earlier could not be told apart from them.
	debug.FreeOSMemory()
	resetHWM()
	own := selfHWM()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return modeResult{}, "", err
	}
	peaks := sampleAnonOf(cmd.Process.Pid, anonSampleEvery)
	err := cmd.Wait()
	wall := time.Since(start)
	peakAnon, sampledHWM := peaks()
	name := filepath.Base(env.CLI) + " " + args[0]
	if err != nil {
		return modeResult{}, "", fmt.Errorf("%s: %w: %s", name, err, lastLine(errOut.String()))
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return modeResult{}, "", errors.New("no rusage for the CLI's process")
	}
	// ru_maxrss is at least this process' RSS when the CLI started; only
	// well above what this process reached it is the CLI's own.
	own = max(own, selfHWM())
	hwm, sampled := ru.Maxrss<<10, false
	if hwm <= own+cliPeakMargin {
		// ru_maxrss cannot tell the CLI's peak from this process' own:
		// the CLI's VmHWM as last sampled before it ended instead.
		if sampledHWM <= 0 {
			return modeResult{}, "", fmt.Errorf("%s: its peak RSS (%d bytes) is not 1 MiB above that of the process that started it (%d), and no sample of its VmHWM was read: ru_maxrss cannot tell them apart", name, hwm, own)
		}
		hwm, sampled = sampledHWM, true
	}
	return modeResult{Wall: wall.Seconds(), HWM: hwm, AnonHWM: peakAnon, External: true, SampledHWM: sampled}, out.String(), nil
}

// findManifest returns the manifest of backup id of cluster "bench" in
// env's bucket.
func findManifest(ctx context.Context, env modeEnv, id string) (*backup.Manifest, error) {
	bucket, err := env.bucket()
	if err != nil {
		return nil, err
	}
	for info, err := range bucket.List(ctx, backup.ClusterPrefix("bench")) {
		if err != nil {
			return nil, err
		}
		if !strings.HasSuffix(info.Key, backup.ManifestSuffix) || !strings.Contains(info.Key, id) {
			continue
		}
		rc, err := bucket.Get(ctx, info.Key)
		if err != nil {
			return nil, err
		}
		m, err := backup.ParseManifest(rc)
		rc.Close()
		if err != nil {
			return nil, err
		}
		if m.ID == id {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no manifest of backup %q in the bucket", id)
}

// lastLine returns the last line of s that is not empty.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
