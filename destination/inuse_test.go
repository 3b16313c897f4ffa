package destination_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
)

// users is what a host tells the registry of its backup configs.
type users struct {
	mu sync.Mutex
	m  map[string][]string
}

func (u *users) of(dest string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.m[dest]
}

func (u *users) set(dest string, configs ...string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.m[dest] = configs
}

// TestDestinationInUse: on MinIO, a destination that configs use is
// neither removed nor moved to another bucket, unless forced; rotating
// its credentials stays allowed; the one named default is never removed.
func TestDestinationInUse(t *testing.T) {
	srv := miniotest.Start(t)
	ctx := testCtx(t)
	b1, b2 := srv.NewBucket(t, miniotest.BucketOptions{}), srv.NewBucket(t, miniotest.BucketOptions{})
	u := &users{m: map[string][]string{}}
	const secretKey = "rotated-secret-9f8e7d6c5b4a"
	r := newRegistry(t, destination.Options{
		Users: u.of,
		Secrets: destination.StaticSecrets{
			"minio":   {AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey()},
			"rotated": {AccessKey: srv.AccessKey(), SecretKey: secretKey},
		},
	})
	url := func(bucket string) string {
		return fmt.Sprintf("s3://%s/seed?endpoint=%s&insecure=true&region=us-east-1", bucket, srv.Endpoint())
	}
	creds := destination.Credentials{Source: destination.SourceSecret, Secret: "minio"}
	_, err := r.Add(ctx, destination.Spec{Name: "default", URL: url(b1), Credentials: creds})
	require.NoError(t, err)
	_, err = r.Add(ctx, destination.Spec{Name: "eu", URL: url(b2), Credentials: creds})
	require.NoError(t, err)
	u.set("eu", "prod-a/hourly", "prod-b/daily")

	err = r.Remove("eu")
	require.ErrorIs(t, err, destination.ErrInUse)
	var inUse *destination.InUseError
	require.ErrorAs(t, err, &inUse)
	require.Equal(t, []string{"prod-a/hourly", "prod-b/daily"}, inUse.Users)
	require.Contains(t, err.Error(), "prod-a/hourly")

	moved := destination.Spec{Name: "eu", Credentials: creds}
	moved.URL = fmt.Sprintf("s3://%s/elsewhere?endpoint=%s&insecure=true&region=us-east-1", b1, srv.Endpoint())
	_, err = r.Update(ctx, "eu", moved)
	require.ErrorIs(t, err, destination.ErrInUse)
	d, err := r.Get("eu")
	require.NoError(t, err)
	require.Equal(t, b2, d.Location().Bucket, "the refused move changed nothing")

	// Credential rotation is no move.
	_, err = r.Update(ctx, "eu", destination.Spec{Name: "eu", URL: url(b2), Credentials: destination.Credentials{Source: destination.SourceSecret, Secret: "rotated"}})
	require.NoError(t, err)

	// Apply refuses too, and says so for every destination at once.
	_, err = r.Apply(ctx, destination.Desired{Destinations: []destination.Spec{{Name: "default", URL: url(b1), Credentials: creds}}})
	require.ErrorIs(t, err, destination.ErrInUse)
	require.Len(t, r.List(), 2)

	// Forced, the host takes responsibility.
	_, err = r.Update(ctx, "eu", moved, destination.Force())
	require.NoError(t, err)
	require.NoError(t, r.Remove("eu", destination.Force()))

	// Not in use any more: no force needed.
	_, err = r.Add(ctx, destination.Spec{Name: "us", URL: url(b2), Credentials: creds})
	require.NoError(t, err)
	require.NoError(t, r.SetDefault("us"))
	err = r.Remove("default")
	require.ErrorIs(t, err, destination.ErrRemoveDefault, "the destination named default is never removed, default or not")
	_, err = r.Apply(ctx, destination.Desired{Destinations: []destination.Spec{{Name: "us", URL: url(b2), Credentials: creds}}, Force: true})
	require.ErrorIs(t, err, destination.ErrRemoveDefault)
	require.False(t, strings.Contains(err.Error(), secretKey))
}

// TestTargetWithoutURL: a target whose URL is not filled in is kept and
// reported Unavailable with a reason, and becomes available once given one.
func TestTargetWithoutURL(t *testing.T) {
	ctx := testCtx(t)
	r := newRegistry(t, destination.Options{})
	_, err := r.Add(ctx, destination.Spec{Name: "default", URL: "mem://main"})
	require.NoError(t, err)
	for _, name := range []string{"later", "also-later"} {
		d, err := r.Add(ctx, destination.Spec{Name: name})
		require.NoError(t, err, "two targets without a URL do not overlap")
		st, err := r.Check(ctx, d.Name())
		require.NoError(t, err, "the failure is the status's")
		require.Equal(t, destination.StateUnavailable, st.State)
		require.Equal(t, destination.ReasonNotConfigured, st.Reason)
		require.Contains(t, st.Message, "no URL")
	}
	_, err = r.Update(ctx, "later", destination.Spec{Name: "later", URL: "mem://later"})
	require.NoError(t, err)
	st, err := r.Check(ctx, "later")
	require.NoError(t, err)
	require.True(t, st.Available())
}
