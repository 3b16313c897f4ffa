package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// TestNoCommandRepeatsASecretInAURL runs every command that takes a
// destination with a secret in each place a URL can carry one (user
// information, a query parameter, an endpoint's user information, a URL
// that does not parse), given by flag, repeated flag and variable: each
// is refused, and no output holds the secret.
func TestNoCommandRepeatsASecretInAURL(t *testing.T) {
	etcd := etcdtest.Start(t)
	endpoints := "--endpoints=" + strings.Join(etcd.Endpoints(), ",")
	dir := t.TempDir()
	good := "file://" + dir
	urls := []string{
		"s3://AKIAEXAMPLE:" + canary + "@backups/seed?endpoint=127.0.0.1:9&insecure=true",
		"s3://backups/seed?endpoint=127.0.0.1:9&insecure=true&secretKey=" + canary,
		"s3://backups/seed?endpoint=AKIAEXAMPLE:" + canary + "@127.0.0.1:9",
		"s3://backups/seed%zz?token=" + canary,
		"gs://backups/seed?access_token=" + canary,
		"AKIAEXAMPLE:" + canary + "@backups",
	}
	commands := map[string][]string{
		"save":    {endpoints},
		"follow":  {endpoints},
		"export":  {endpoints, "--prefix=/a/"},
		"import":  {endpoints},
		"diff":    {endpoints, "--backup=latest"},
		"list":    nil,
		"verify":  {"--backup=latest"},
		"restore": {"--data-dir=" + dir + "/restored"},
		"prune":   {"--keep-last=1"},
		"delete":  {"--backup=prod-manual-20261124T190000.000Z"},
	}
	tr := &transcript{t: t}
	for cmd, extra := range commands {
		for _, u := range urls {
			args := append([]string{cmd, "--cluster=prod", "--destination=" + u}, extra...)
			r := tr.run("", args...)
			require.Equal(t, exitUsage, r.code, "etcdbackup %s ... %s", cmd, r)
			if cmd == "save" {
				r = tr.run("", append([]string{cmd, "--cluster=prod", "--destination=" + good, "--destination=" + u}, extra...)...)
				require.Equal(t, exitUsage, r.code, "etcdbackup save (second destination) %s", r)
			}
			t.Setenv("ETCDBACKUP_DESTINATION", u)
			r = tr.run("", append([]string{cmd, "--cluster=prod"}, extra...)...)
			require.Equal(t, exitUsage, r.code, "ETCDBACKUP_DESTINATION etcdbackup %s %s", cmd, r)
			t.Setenv("ETCDBACKUP_DESTINATION", "")
		}
	}
	tr.requireNoSecret(canary)
}
