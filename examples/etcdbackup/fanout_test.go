package main

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
)

// TestSaveFanOut: repeated --destination stores one snapshot on each. With
// one of two MinIO destinations unreachable, save prints each outcome,
// exits 1, and the other holds a backup that verifies.
func TestSaveFanOut(t *testing.T) {
	tr := &transcript{t: t}
	etcd := etcdtest.Start(t)
	_, err := etcdtest.Fill(t.Context(), etcd.Client(t), etcdtest.FillOptions{Keys: 200, Seed: 3})
	require.NoError(t, err)
	endpoints := "--endpoints=" + strings.Join(etcd.Endpoints(), ",")
	srv := miniotest.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey())
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey())
	a := fmt.Sprintf("s3://%s/seed?endpoint=%s&insecure=true", srv.NewBucket(t, miniotest.BucketOptions{}), srv.Endpoint())
	b := fmt.Sprintf("s3://%s/seed?endpoint=%s&insecure=true", srv.NewBucket(t, miniotest.BucketOptions{}), srv.Endpoint())

	r := tr.ok("save", endpoints, "--destination="+a, "--destination="+b, "--cluster=prod", "--quiet")
	id := r.lastLine()
	// Each result is named by the URL it went to, as an operator may see it.
	require.Contains(t, r.stderr, "destination "+targetLabel(a)+": stored "+id)
	require.Contains(t, r.stderr, "destination "+targetLabel(b)+": stored "+id)
	for _, d := range []string{a, b} {
		tr.ok("verify", "--destination="+d, "--cluster=prod", "--backup="+id)
	}

	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := fmt.Sprintf("s3://gone/seed?endpoint=%s&insecure=true", l.Addr())
	require.NoError(t, l.Close())
	r = tr.fails(exitFailure, "save", endpoints, "--destination="+down, "--destination="+a, "--cluster=prod", "--quiet")
	id = r.lastLine()
	require.Contains(t, r.stderr, "destination "+targetLabel(down)+": failed")
	require.Contains(t, r.stderr, "destination "+targetLabel(a)+": stored "+id)
	require.Contains(t, r.stderr, "1 of 2 destinations failed")
	tr.ok("verify", "--destination="+a, "--cluster=prod", "--backup="+id)

	tr.fails(exitUsage, "list", "--destination="+a, "--destination="+b, "--cluster=prod")
	tr.fails(exitUsage, "save", endpoints, "--destination="+a, "--destination="+a, "--cluster=prod")
}
