package s3_test

import (
	"bytes"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// TestUnsignedPayload: with UnsignedPayload, parts go over plain HTTP
// unsigned, and MinIO stores them intact.
func TestUnsignedPayload(t *testing.T) {
	srv := miniotest.Start(t)
	var (
		mu      sync.Mutex
		signing []string
	)
	for _, unsigned := range []bool{false, true} {
		b, _ := newBucket(t, srv, false, func(o *s3.Options) {
			o.PartSize = 5 * mib
			o.UnsignedPayload = unsigned
			o.Transport = roundTripFunc(func(req *http.Request) (*http.Response, error) {
				if req.Method == http.MethodPut {
					mu.Lock()
					signing = append(signing, req.Header.Get("X-Amz-Content-Sha256"))
					mu.Unlock()
				}
				return newBaseTransport(t).RoundTrip(req)
			})
		})
		signing = nil
		body := bytes.Repeat([]byte("unsigned? "), 1<<20) // 10 MiB: two parts
		require.NoError(t, b.Put(testCtx(t), "k", onlyReader{bytes.NewReader(body)}, nil))
		rc, err := b.Get(testCtx(t), "k")
		require.NoError(t, err)
		got, err := io.ReadAll(rc)
		require.NoError(t, err)
		rc.Close()
		require.Equal(t, body, got)
		require.Len(t, signing, 2, "two parts")
		for _, h := range signing {
			if unsigned {
				require.Equal(t, "UNSIGNED-PAYLOAD", h)
			} else {
				require.Len(t, h, 64, "a SHA-256 of the part")
			}
		}
	}
}
