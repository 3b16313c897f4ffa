package blob_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/faultproxy"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage"
)

// TestS3ConditionalRequestConflict: Amazon S3 answers 409
// ConditionalRequestConflict, not 412, to the loser of two conditional
// writes of one key in flight at once. Through s3blob, an exclusive put so
// answered is ErrExist when the winner's object is visible, and otherwise
// fails having written nothing.
func TestS3ConditionalRequestConflict(t *testing.T) {
	srv := miniotest.Start(t)
	theirs := []byte("theirs")
	for _, winner := range []bool{true, false} {
		t.Run(map[bool]string{true: "another write won", false: "nothing there"}[winner], func(t *testing.T) {
			ctx := t.Context()
			proxy := faultproxy.StartHTTP(t, srv.Endpoint())
			f := newS3FixtureAt(t, srv, proxy.Addr(), nil)
			direct := newS3Client(t, srv, srv.AccessKey(), srv.SecretKey())
			rule := faultproxy.Rule{Name: "conflict", Match: faultproxy.IsObjectCreation, Action: faultproxy.ConditionalConflict, Times: 1}
			if winner {
				rule.Before = func() {
					_, err := direct.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(f.name), Key: aws.String("k"), Body: bytes.NewReader(theirs)})
					assert.NoError(t, err, "the other writer")
				}
			}
			proxy.SetRules(rule)

			err := f.bucket.PutIfAbsent(ctx, "k", bytes.NewReader([]byte("ours")), nil)
			require.Equal(t, 1, proxy.Fired()["conflict"])
			require.Error(t, err)
			rc, gerr := f.bucket.Get(ctx, "k")
			if !winner {
				require.NotErrorIs(t, err, storage.ErrExist, "nothing is at the key")
				require.ErrorIs(t, gerr, storage.ErrNotFound)
				return
			}
			require.ErrorIs(t, err, storage.ErrExist)
			require.NoError(t, gerr)
			got, rerr := io.ReadAll(rc)
			_ = rc.Close()
			require.NoError(t, rerr)
			require.Equal(t, theirs, got, "the winner's object is kept")
		})
	}
}
