package s3_test

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// nginx (and ingress-nginx) by default drop request headers
// whose names hold '_' (underscores_in_headers off, ignore_invalid_headers
// on). The put token once travelled as x-amz-meta-etcdbackup_put_token, a
// signed header: behind such a proxy MinIO saw a signed header missing.
func TestPutIfAbsentBehindProxyDroppingUnderscoreHeaders(t *testing.T) {
	srv := miniotest.Start(t)
	name := srv.NewBucket(t, miniotest.BucketOptions{})
	target, _ := url.Parse("http://" + srv.Endpoint())
	rp := httputil.NewSingleHostReverseProxy(target)
	dropped := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k := range r.Header {
			if strings.Contains(k, "_") {
				r.Header.Del(k)
				dropped++
			}
		}
		rp.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := &http.Server{Handler: h}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })

	opts := srv.S3Options(name)
	opts.Endpoint = ln.Addr().String()
	b, err := s3.New(opts)
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, b.Put(ctx, "plain", bytes.NewReader([]byte("x")), &storage.PutOptions{Metadata: map[string]string{"etcdbackup-id": "1"}}), "a plain put passes")
	err = b.PutIfAbsent(ctx, "exclusive", bytes.NewReader([]byte("x")), &storage.PutOptions{Metadata: map[string]string{"etcdbackup-id": "1"}})
	t.Logf("headers dropped: %d; PutIfAbsent: %v", dropped, err)
	require.NoError(t, err, "an exclusive put behind a default nginx")
}
