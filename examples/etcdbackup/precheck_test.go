package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
)

// TestSaveWriteOnlyCredentials: write-only S3 credentials (PutObject
// allowed, ListBucket denied, a common hardening of a backup writer) pass
// save's pre-check: only a store that surely cannot take the backup fails
// it.
func TestSaveWriteOnlyCredentials(t *testing.T) {
	tr := &transcript{t: t}
	etcd := etcdtest.Start(t)
	endpoints := "--endpoints=" + strings.Join(etcd.Endpoints(), ",")
	srv := miniotest.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey())
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey())
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	target, _ := url.Parse("http://" + srv.Endpoint())
	rp := httputil.NewSingleHostReverseProxy(target)
	denied := 0
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && (r.URL.Query().Has("list-type") || r.URL.Query().Has("prefix") || strings.Trim(r.URL.Path, "/") == bucket) {
			denied++
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied.</Message></Error>`)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	dest := fmt.Sprintf("--destination=s3://%s/seed?endpoint=%s&insecure=true", bucket, strings.TrimPrefix(proxy.URL, "http://"))
	r := tr.run("", "save", endpoints, dest, "--cluster=prod", "--quiet")
	t.Logf("denied %d list requests; exit %d\n%s", denied, r.code, r.stderr)
	require.Equal(t, exitOK, r.code, "%s", r)
}

// TestFanOutLabelsTellSitesApart: two destinations with the same bucket
// and path on different endpoints (two sites) are named apart in save's
// outcome lines.
func TestFanOutLabelsTellSitesApart(t *testing.T) {
	tr := &transcript{t: t}
	etcd := etcdtest.Start(t)
	endpoints := "--endpoints=" + strings.Join(etcd.Endpoints(), ",")
	srv := miniotest.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey())
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey())
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := l.Addr().String()
	require.NoError(t, l.Close())
	up := fmt.Sprintf("s3://%s/seed?endpoint=%s&insecure=true", bucket, srv.Endpoint())
	down := fmt.Sprintf("s3://%s/seed?endpoint=%s&insecure=true", bucket, dead)
	r := tr.run("", "save", endpoints, "--destination="+up, "--destination="+down, "--cluster=prod", "--quiet", "--output=json")
	t.Logf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	require.NotContains(t, r.stderr, "destination s3://"+bucket+"/seed: failed", "which one failed?")
}
