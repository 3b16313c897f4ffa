package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// TestUsageErrors checks that every mistake in a command line or in the
// input it names exits 2 with one line on stderr and nothing on stdout,
// before any server is contacted, and that no secret is repeated.
func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	config := writeFile(t, dir, "ok.yaml", "default: main\ndestinations:\n  main:\n    url: file://"+dir+"\n")
	unknownField := writeFile(t, dir, "unknown.yaml", "destinations:\n  main:\n    url: file:///tmp\n    bucket: x\n")
	badDefault := writeFile(t, dir, "default.yaml", "default: nope\ndestinations:\n  main:\n    url: file:///tmp\n")
	noDefault := writeFile(t, dir, "nodefault.yaml", "destinations:\n  a:\n    url: file:///tmp/a\n  b:\n    url: file:///tmp/b\n")
	halfKeys := writeFile(t, dir, "halfkeys.yaml", "destinations:\n  main:\n    url: s3://b?endpoint=127.0.0.1:1\n    credentials:\n      accessKeyID: AK\n")
	bothKeys := writeFile(t, dir, "bothkeys.yaml", "destinations:\n  main:\n    url: s3://b?endpoint=127.0.0.1:1\n    credentials:\n      accessKeyID: AK\n      secretAccessKey: "+canary+"\n      secretAccessKeyFile: /x\n")
	wrongType := writeFile(t, dir, "wrongtype.yaml", "destinations:\n  main:\n    url: file:///tmp\n    readOnly: "+canary+"\n")
	overlap := writeFile(t, dir, "overlap.yaml", "destinations:\n  a:\n    url: file:///tmp/x\n  b:\n    url: file:///tmp/x\ndefault: a\n")
	keysOnFile := writeFile(t, dir, "keysonfile.yaml", "destinations:\n  main:\n    url: file:///tmp\n    credentials:\n      accessKeyID: AK\n      secretAccessKey: "+canary+"\n")
	twoDocs := writeFile(t, dir, "twodocs.yaml", "destinations:\n  main:\n    url: file:///tmp\n---\ndefault: main\n")
	notYAML := writeFile(t, dir, "notyaml.yaml", "destinations: [\n")
	empty := writeFile(t, dir, "empty.yaml", "")
	garbage := writeFile(t, dir, "garbage.txt", "AGE-SECRET-KEY-"+canary+"\n")
	nonEmpty := t.TempDir()
	writeFile(t, nonEmpty, "member", "")
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)

	dest := "--destination=file://" + dir
	for _, tc := range []struct {
		name string
		args []string
		want string // in the error line
	}{
		{"no command", nil, "usage"},
		{"unknown command", []string{"backup"}, `unknown command "backup"`},
		{"unknown flag", []string{"list", dest, "--cluster=prod", "--bogus"}, "-bogus"},
		{"positional argument", []string{"list", dest, "--cluster=prod", "extra"}, `unexpected argument "extra"`},
		{"no cluster", []string{"list", dest}, "--cluster is required"},
		{"invalid cluster", []string{"list", dest, "--cluster=Prod/../x"}, "cluster"},
		{"no destination", []string{"list", "--cluster=prod"}, "--destination is required"},
		{"name without config", []string{"list", "--destination=main", "--cluster=prod"}, "needs --config"},
		{"unknown name", []string{"list", "--config=" + config, "--destination=offsite", "--cluster=prod"}, `no destination "offsite"`},
		{"bad output", []string{"list", dest, "--cluster=prod", "--output=yaml"}, "--output"},
		{"bad url", []string{"list", "--destination=ftp://host/x", "--cluster=prod"}, "ftp"},
		{"credentials in url", []string{"list", "--destination=s3://AKIA:" + canary + "@bucket/x", "--cluster=prod"}, "credentials"},
		{"missing config", []string{"list", "--config=" + filepath.Join(dir, "nope.yaml"), "--cluster=prod"}, "config file"},
		{"unknown config field", []string{"list", "--config=" + unknownField, "--cluster=prod"}, "bucket"},
		{"bad default", []string{"list", "--config=" + badDefault, "--cluster=prod"}, `default "nope"`},
		{"no default", []string{"list", "--config=" + noDefault, "--cluster=prod"}, "no default"},
		{"half keys", []string{"list", "--config=" + halfKeys, "--cluster=prod"}, "secretAccessKey"},
		{"both keys", []string{"list", "--config=" + bothKeys, "--cluster=prod"}, "one of secretAccessKey"},
		{"wrong type", []string{"list", "--config=" + wrongType, "--cluster=prod"}, "true or false"},
		{"overlapping destinations", []string{"list", "--config=" + overlap, "--cluster=prod"}, "location"},
		{"keys on a file destination", []string{"list", "--config=" + keysOnFile, "--cluster=prod"}, "credentials"},
		{"two documents", []string{"list", "--config=" + twoDocs, "--cluster=prod"}, "more than one"},
		{"not yaml", []string{"list", "--config=" + notYAML, "--cluster=prod"}, "config file"},
		{"empty config", []string{"list", "--config=" + empty, "--cluster=prod"}, "is empty"},
		{"save without endpoints", []string{"save", dest, "--cluster=prod"}, "--endpoints is required"},
		{"bad compression", []string{"save", dest, "--cluster=prod", "--endpoints=127.0.0.1:1", "--compression=lz4"}, "--compression"},
		{"bad zstd level", []string{"save", dest, "--cluster=prod", "--endpoints=127.0.0.1:1", "--compression=zstd:best"}, "zstd's levels are fastest, default and better"},
		{"gzip level", []string{"follow", dest, "--cluster=prod", "--endpoints=127.0.0.1:1", "--compression=gzip:9"}, "gzip and none have none"},
		{"bad backup name", []string{"save", dest, "--cluster=prod", "--endpoints=127.0.0.1:1", "--name=Nightly"}, "backup"},
		{"bad recipient", []string{"save", dest, "--cluster=prod", "--endpoints=127.0.0.1:1", "--recipient=age1nope"}, "recipient"},
		{"missing recipient file", []string{"save", dest, "--cluster=prod", "--endpoints=127.0.0.1:1", "--recipient-file=" + filepath.Join(dir, "none")}, "none"},
		{"cert without key", []string{"save", dest, "--cluster=prod", "--endpoints=127.0.0.1:1", "--cert=c.pem"}, "--key"},
		{"missing ca file", []string{"save", dest, "--cluster=prod", "--endpoints=127.0.0.1:1", "--cacert=" + filepath.Join(dir, "ca.pem")}, "ca.pem"},
		{"garbage identity", []string{"verify", dest, "--cluster=prod", "--identity=" + garbage}, "no valid age identity"},
		{"missing identity", []string{"verify", dest, "--cluster=prod", "--identity=" + filepath.Join(dir, "none")}, "none"},
		{"restore without data dir", []string{"restore", dest, "--cluster=prod"}, "--data-dir is required"},
		{"restore into a non-empty dir", []string{"restore", dest, "--cluster=prod", "--data-dir=" + nonEmpty}, "not empty"},
		{"restore with a foreign initial cluster", []string{"restore", dest, "--cluster=prod", "--data-dir=" + filepath.Join(dir, "d"), "--name=a", "--initial-cluster=b=http://127.0.0.1:2380"}, "initial cluster"},
		{"prune without keep", []string{"prune", dest, "--cluster=prod"}, "--keep"},
		{"destinations without config", []string{"destinations"}, "--config is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("ETCDBACKUP_CONFIG", "")
			tr := &transcript{t: t}
			r := tr.run(id.String(), tc.args...)
			require.Equal(t, exitUsage, r.code, r)
			require.Empty(t, r.stdout)
			if tc.args == nil {
				require.Contains(t, r.stderr, "usage")
				return
			}
			require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line on stderr: %q", r.stderr)
			require.Contains(t, r.stderr, tc.want)
			tr.requireNoSecret(canary)
		})
	}
}

// TestHelp checks that every command explains its flags on stdout and exits 0.
func TestHelp(t *testing.T) {
	tr := &transcript{t: t}
	r := tr.ok("help")
	for _, c := range commands {
		require.Contains(t, r.stdout, c.name)
		r := tr.ok(c.name, "--help")
		require.Contains(t, r.stdout, "usage: etcdbackup "+c.name)
		require.Empty(t, r.stderr)
	}
	for cmd, flags := range map[string][]string{
		"save":         {"-endpoints", "-cacert", "-cert", "-key", "-destination", "-config", "-cluster", "-name", "-compression", "-recipient", "-recipient-file"},
		"list":         {"-destination", "-cluster", "-output"},
		"verify":       {"-destination", "-cluster", "-backup", "-identity"},
		"restore":      {"-data-dir", "-name", "-initial-cluster", "-initial-advertise-peer-urls", "-initial-cluster-token", "-backup", "-identity"},
		"prune":        {"-keep", "-dry-run"},
		"destinations": {"-config"},
	} {
		r := tr.ok(cmd, "-h")
		for _, f := range flags {
			require.True(t, strings.Contains(r.stdout, "  "+f+" ") || strings.Contains(r.stdout, "  "+f+"\n"),
				"%s --help mentions %s:\n%s", cmd, f, r.stdout)
		}
	}
}

func TestByteSizeFlag(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1024": 1024, "32MiB": 32 << 20, "64KiB": 64 << 10, "1GiB": 1 << 30} {
		var b byteSize
		if err := b.Set(in); err != nil || int64(b) != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "-1", "32MB", "lots", "2000GiB"} {
		var b byteSize
		if err := b.Set(in); err == nil {
			t.Errorf("Set(%q) = %d, want an error", in, b)
		}
	}
}

func TestVersion(t *testing.T) {
	var stdout, stderr strings.Builder
	require.Equal(t, exitOK, run(t.Context(), []string{"version", "--output=json"}, strings.NewReader(""), &stdout, &stderr), stderr.String())
	var v versions
	require.NoError(t, json.Unmarshal([]byte(stdout.String()), &v))
	require.Equal(t, runtime.Version(), v.Go)
	require.NotEmpty(t, v.Etcdbackup)
	require.True(t, strings.HasPrefix(v.EtcdClient, "v3."), v.EtcdClient)
}

// TestFlagsFromEnvironment: a flag left out reads ETCDBACKUP_<FLAG>, then
// etcdctl's variable; the command line wins; a bad value names its
// variable and is a usage error.
func TestFlagsFromEnvironment(t *testing.T) {
	newFlags := func() (*flagSet, *etcdFlags, *byteSize) {
		fs := newFlagSet("save", "")
		var etcd etcdFlags
		etcd.register(fs)
		var enc encodingFlags
		enc.register(fs)
		return fs, &etcd, &enc.memory
	}
	env := map[string]string{"ETCDCTL_ENDPOINTS": "a:2379,b:2379", "ETCDCTL_CACERT": "/ctl/ca.pem",
		"ETCDBACKUP_CACERT": "/backup/ca.pem", "ETCDBACKUP_MEMORY": "64MiB", "ETCDBACKUP_DIAL_TIMEOUT": "7s"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }

	fs, etcd, mem := newFlags()
	require.NoError(t, fs.Parse([]string{"--dial-timeout=3s"}))
	require.NoError(t, fs.fromEnv(lookup))
	require.Equal(t, []string{"a:2379", "b:2379"}, []string(etcd.endpoints), "etcdctl's variable as a fallback")
	require.Equal(t, "/backup/ca.pem", etcd.cacert, "ours before etcdctl's")
	require.Equal(t, byteSize(64<<20), *mem)
	require.Equal(t, 3*time.Second, etcd.dialTimeout, "the command line wins")

	env["ETCDBACKUP_MEMORY"] = "lots"
	fs, _, _ = newFlags()
	require.NoError(t, fs.Parse(nil))
	err := fs.fromEnv(lookup)
	require.ErrorContains(t, err, "$ETCDBACKUP_MEMORY")
	require.Equal(t, exitUsage, exitCode(err))
}

// TestDefaultConfigFile: without --config or $ETCDBACKUP_CONFIG, the
// destinations come from $XDG_CONFIG_HOME/etcdbackup/config.yaml.
func TestDefaultConfigFile(t *testing.T) {
	xdg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", xdg)
	t.Setenv("ETCDBACKUP_CONFIG", "")
	d := destinationFlags{cluster: "prod"}
	require.ErrorContains(t, d.validate(), "--destination is required", "no file, no destination")
	require.NoError(t, os.MkdirAll(filepath.Join(xdg, "etcdbackup"), 0o700))
	path := writeFile(t, filepath.Join(xdg, "etcdbackup"), "config.yaml", "default: main\ndestinations:\n  main:\n    url: file:///tmp\n")
	d = destinationFlags{cluster: "prod"}
	require.NoError(t, d.validate())
	require.Equal(t, path, d.config)
}

// TestInterruptedExits130: a save whose context ends (SIGINT) exits 130.
func TestInterruptedExits130(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var stdout, stderr strings.Builder
	code := run(ctx, []string{"save", "--endpoints=" + srv.Endpoints()[0], "--destination=file://" + t.TempDir(), "--cluster=prod"},
		strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, exitInterrupted, code, stderr.String())
	require.Contains(t, stderr.String(), "interrupted")
}
