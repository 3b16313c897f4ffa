package s3_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/faultproxy"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// TestConditionalRequestConflict: Amazon S3 answers 409
// ConditionalRequestConflict, not 412, to the loser of two conditional
// writes of one key in flight at once. A PutObject is retried, as AWS
// documents, and meets the winner's object (ErrExist) or writes its own; a
// completion that lost to an object now visible is ErrExist; one with
// nothing at the key fails, writes nothing and leaves no upload behind.
func TestConditionalRequestConflict(t *testing.T) {
	srv := miniotest.Start(t)
	ours, theirs := bytes.Repeat([]byte("o"), 11*mib), bytes.Repeat([]byte("t"), 100)
	tests := []struct {
		name     string
		size     int // of our object: 11 MiB is a multipart upload of 5 MiB parts
		match    func(*http.Request) bool
		winner   bool // another writer's object lands before the 409
		wantErr  error
		wantBody []byte // nil: nothing at the key
	}{
		{name: "put, nothing there", size: 100, match: faultproxy.IsPutObject, wantBody: ours[:100]},
		{name: "put, another write won", size: 100, match: faultproxy.IsPutObject, winner: true, wantErr: storage.ErrExist, wantBody: theirs},
		{name: "completion, another write won", size: 11 * mib, match: faultproxy.IsCompleteMultipart, winner: true, wantErr: storage.ErrExist, wantBody: theirs},
		{name: "completion, nothing there", size: 11 * mib, match: faultproxy.IsCompleteMultipart, wantErr: errAny},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			proxy := faultproxy.StartHTTP(t, srv.Endpoint())
			b, name := newBucket(t, srv, false, func(o *s3.Options) {
				o.Endpoint = proxy.Addr()
				o.PartSize, o.PartsInFlight = 5*mib, 2
			})
			direct, err := s3.New(srv.S3Options(name))
			require.NoError(t, err)
			rule := faultproxy.Rule{Name: "conflict", Match: tc.match, Action: faultproxy.ConditionalConflict, Times: 1}
			if tc.winner {
				rule.Before = func() {
					assert.NoError(t, direct.PutIfAbsent(ctx, "k", bytes.NewReader(theirs), nil), "the other writer")
				}
			}
			proxy.SetRules(rule)

			err = b.PutIfAbsent(ctx, "k", onlyReader{bytes.NewReader(ours[:tc.size])}, nil)
			require.Equal(t, 1, proxy.Fired()["conflict"])
			switch tc.wantErr {
			case nil:
				require.NoError(t, err)
			case errAny:
				require.Error(t, err)
				require.NotErrorIs(t, err, storage.ErrExist, "nothing is at the key")
			default:
				require.ErrorIs(t, err, tc.wantErr)
			}
			rc, err := direct.Get(ctx, "k")
			if tc.wantBody == nil {
				require.ErrorIs(t, err, storage.ErrNotFound)
			} else {
				require.NoError(t, err)
				got, err := io.ReadAll(rc)
				_ = rc.Close()
				require.NoError(t, err)
				require.True(t, bytes.Equal(tc.wantBody, got), "the key holds the winner's object")
			}
			uploads, err := srv.IncompleteUploads(ctx, name)
			require.NoError(t, err)
			require.Empty(t, uploads, "no incomplete upload is left")
		})
	}
}

// errAny stands for any error that is not storage.ErrExist.
var errAny = errors.New("any error")
