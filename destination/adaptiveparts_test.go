package destination_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
)

// adaptiveParts=true in an s3 URL reaches the uploads: a reader faster
// than the store gets parts sized to the store's pace (smaller ones here),
// where by default every part is the configured size. A multipart
// object's ETag ends in its part count.
func TestAdaptivePartsURL(t *testing.T) {
	srv := miniotest.Start(t)
	ctx := testCtx(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	r := newRegistry(t, destination.Options{
		Secrets:  destination.StaticSecrets{"minio": {AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey()}},
		PartSize: 8 << 20, PartsInFlight: 2,
	})
	data := make([]byte, 40<<20)
	_, _ = rand.Read(data)
	parts := func(name, query string) string {
		spec := destination.Spec{Name: name, URL: fmt.Sprintf("s3://%s/%s?endpoint=%s&insecure=true&region=us-east-1%s", bucket, name, srv.Endpoint(), query),
			Credentials: destination.Credentials{Source: destination.SourceSecret, Secret: "minio"}}
		d, err := r.Add(ctx, spec)
		require.NoError(t, err)
		require.NoError(t, d.Put(ctx, "k", bytes.NewReader(data), nil))
		info, err := d.Stat(ctx, "k")
		require.NoError(t, err)
		_, n, _ := strings.Cut(strings.Trim(info.ETag, `"`), "-")
		return n
	}
	assert.Equal(t, "5", parts("fixed", ""), "40 MiB in 8 MiB parts by default")
	assert.NotEqual(t, "5", parts("adaptive", "&adaptiveParts=true"), "parts sized to the pace")
}
