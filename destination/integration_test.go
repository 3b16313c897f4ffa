package destination_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// startRun runs the registry until the test ends.
func startRun(t *testing.T, r *destination.Registry) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// transitions records when each destination's status changed.
type transitions struct {
	mu  sync.Mutex
	all []destination.Event
}

func (tr *transitions) Observe(e destination.Event) {
	if e.Kind != destination.StatusChanged {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.all = append(tr.all, e)
}

// firstSince returns the first transition of dest to state at or after
// since, and whether there is one.
func (tr *transitions) firstSince(dest string, state destination.State, since time.Time) (destination.Event, bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, e := range tr.all {
		if e.Destination == dest && e.Status.State == state && !e.Time.Before(since) {
			return e, true
		}
	}
	return destination.Event{}, false
}

func (tr *transitions) messages() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var b strings.Builder
	for _, e := range tr.all {
		fmt.Fprintf(&b, "%+v %+v\n", e.Status, e.Previous)
	}
	return b.String()
}

// Two MinIO buckets and a file destination: stopping MinIO makes the S3
// destinations unreachable within two check intervals, restarting makes
// them available again, the file destination never notices, and wrong
// credentials show as auth without the secret appearing anywhere.
func TestAvailabilityWithMinIO(t *testing.T) {
	srv := miniotest.Start(t)
	ignore := goleak.IgnoreCurrent()
	ctx := testCtx(t)
	b1, b2 := srv.NewBucket(t, miniotest.BucketOptions{}), srv.NewBucket(t, miniotest.BucketOptions{})
	const wrongSecret = "wrong-secret-d41d8cd98f00b204e980"
	var logs logBuffer
	tr := &transitions{}
	const interval = 400 * time.Millisecond
	r, err := destination.NewRegistry(destination.Options{
		Secrets: destination.StaticSecrets{
			"minio": {AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey()},
			"wrong": {AccessKey: srv.AccessKey(), SecretKey: wrongSecret},
		},
		Logger:        logs.logger(),
		Observer:      tr,
		CheckInterval: interval,
		PollInterval:  time.Hour,
		CheckTimeout:  5 * time.Second,
	})
	require.NoError(t, err)
	secret := destination.Credentials{Source: destination.SourceSecret, Secret: "minio"}
	specs := []destination.Spec{
		{Name: "eu", URL: fmt.Sprintf("s3://%s/seed-eu?endpoint=%s&insecure=true&region=us-east-1", b1, srv.Endpoint()), Credentials: secret},
		// The S3 fields, without a region: the client asks the store.
		{Name: "us", Endpoint: "http://" + srv.Endpoint(), Bucket: b2, Prefix: "seed-us", Credentials: secret},
		{Name: "local", URL: "file://" + t.TempDir()},
		{Name: "bad", URL: fmt.Sprintf("s3://%s/bad?endpoint=%s&insecure=true", b1, srv.Endpoint()),
			Credentials: destination.Credentials{Source: destination.SourceSecret, Secret: "wrong"}},
	}
	_, err = r.Apply(ctx, destination.Desired{Destinations: specs, Default: "eu"})
	require.NoError(t, err)
	startRun(t, r)

	dest := func(name string) *destination.Destination {
		d, err := r.Get(name)
		require.NoError(t, err)
		return d
	}
	require.Eventually(t, func() bool {
		return dest("eu").Status().Available() && dest("us").Status().Available() && dest("local").Status().Available() &&
			dest("bad").Status().State == destination.StateUnavailable
	}, waitFor, 20*time.Millisecond, tr.messages())

	// Wrong credentials.
	bad := dest("bad").Status()
	assert.Equal(t, destination.ReasonAuth, bad.Reason, bad.Message)
	var errs []error
	_, err = dest("bad").Stat(ctx, "x")
	errs = append(errs, err)
	_, err = backup.ListBackups(ctx, dest("bad"), "prod-a")
	errs = append(errs, err)
	p := backup.Pipeline{Snapshotter: &snapshotter{stream: rawSnapshot(8, 1)}, Logger: logs.logger()}
	_, err = p.Run(ctx, backup.Request{Cluster: "prod-a", Name: "nightly", Targets: []backup.Target{dest("bad").Target()}})
	errs = append(errs, err)
	_, err = r.Sync(ctx, "bad")
	errs = append(errs, err)
	for _, err := range errs {
		require.ErrorIs(t, err, storage.ErrPermission)
		assert.Equal(t, destination.ReasonAuth, destination.Classify(err))
	}

	// A backup while all is well, to have something to see in the logs.
	runBackup(t, ctx, "prod-a", "nightly", 2, dest("eu").Target(), dest("us").Target())

	// MinIO stops. The checks notice: the change comes from a check that
	// ended after the stop began, and the first one does. How soon is the
	// check interval's (TestRun checks it on memory stores); on a busy
	// machine a check runs late, so no wall-clock bound is asserted.
	stopping := time.Now()
	srv.Stop(t)
	for _, name := range []string{"eu", "us"} {
		require.Eventually(t, func() bool {
			_, ok := tr.firstSince(name, destination.StateUnavailable, stopping)
			return ok && dest(name).Status().Reason == destination.ReasonUnreachable
		}, waitFor, 10*time.Millisecond, name)
		e, _ := tr.firstSince(name, destination.StateUnavailable, stopping)
		assert.Equal(t, destination.ReasonUnreachable, e.Status.Reason, e.Status.Message)
		assert.False(t, e.Status.LastCheck.Before(stopping), "%s: the change came from a check made after the stop", name)
		assert.Equal(t, 1, e.Status.ConsecutiveFailures, "%s: the first failed check made it unavailable", name)
	}
	_, err = dest("eu").Stat(ctx, "x")
	assert.Equal(t, destination.ReasonUnreachable, destination.Classify(err))

	// MinIO is back.
	srv.Restart(t)
	for _, name := range []string{"eu", "us", "bad"} {
		want := destination.StateAvailable
		if name == "bad" {
			want = destination.StateUnavailable
		}
		require.Eventually(t, func() bool {
			st := dest(name).Status()
			if name != "bad" {
				// The observer hears of the change after the status shows it.
				_, heard := tr.firstSince(name, destination.StateAvailable, stopping)
				return st.State == want && heard
			}
			return st.State == want && st.Reason == destination.ReasonAuth
		}, waitFor, 10*time.Millisecond, name)
		if name != "bad" {
			// Probes may succeed while Restart still waits for readiness:
			// the change came from a check after the stop, and after the
			// check that found MinIO gone.
			gone, _ := tr.firstSince(name, destination.StateUnavailable, stopping)
			e, ok := tr.firstSince(name, destination.StateAvailable, stopping)
			require.True(t, ok, name)
			assert.True(t, e.Status.LastCheck.After(gone.Status.LastCheck), "%s: available again after it was found unreachable", name)
		}
	}
	assert.True(t, dest("local").Status().Available())
	_, ok := tr.firstSince("local", destination.StateUnavailable, time.Time{})
	assert.False(t, ok, "the file destination never became unavailable")

	// The secrets appear nowhere.
	var seen strings.Builder
	for _, d := range r.List() {
		fmt.Fprintf(&seen, "%v %+v %#v %+v\n", d, d.Spec(), d.Spec(), d.Status())
	}
	for _, err := range errs {
		fmt.Fprintln(&seen, err)
	}
	seen.WriteString(tr.messages())
	seen.WriteString(logs.String())
	for _, s := range []string{wrongSecret, srv.SecretKey()} {
		assert.NotContains(t, seen.String(), s)
	}
	assert.Contains(t, logs.String(), "destination unavailable", "the logs were captured")

	require.NoError(t, r.Close())
	// The restarted MinIO process is the test's, not the registry's.
	goleak.VerifyNone(t, ignore,
		goleak.IgnoreAnyFunction("github.com/etcdbackup/etcdbackup/internal/servertest.Launch.func1"),
		goleak.IgnoreAnyFunction("os/exec.(*Cmd).Start.func2"))
}

// The inventory picks up, at a later poll, a backup written by another
// process and a raw snapshot uploaded by hand; removing the destination
// drops its inventory and leaves its objects alone.
func TestInventoryWithMinIO(t *testing.T) {
	srv := miniotest.Start(t)
	ctx := testCtx(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	const poll = 500 * time.Millisecond
	obs := &events{}
	r := newRegistry(t, destination.Options{
		Secrets:      destination.StaticSecrets{"minio": {AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey()}},
		Observer:     obs,
		PollInterval: poll,
	})
	creds := destination.Credentials{Source: destination.SourceSecret, Secret: "minio"}
	_, err := r.Apply(ctx, destination.Desired{Destinations: []destination.Spec{
		{Name: "eu", URL: fmt.Sprintf("s3://%s/seed-eu?endpoint=%s&insecure=true&region=us-east-1", bucket, srv.Endpoint()), Credentials: creds},
		{Name: "local", URL: "file://" + t.TempDir()},
	}, Default: "local"})
	require.NoError(t, err)
	startRun(t, r)
	require.Eventually(t, func() bool {
		inv, err := r.Inventory("eu")
		return err == nil && !inv.Synced.IsZero()
	}, waitFor, 10*time.Millisecond)

	// Another process: its own S3 client and pipeline.
	other, err := s3.New(srv.S3Options(bucket))
	require.NoError(t, err)
	otherPrefixed, err := storage.WithPrefix(other, "seed-eu")
	require.NoError(t, err)
	res := runBackup(t, ctx, "prod-a", "nightly", 7, backup.Target{Destination: "eu", Uploader: &backup.BucketUploader{Bucket: otherPrefixed}})
	raw := rawSnapshot(16, 8)
	_, err = srv.Client(t).PutObject(ctx, bucket, "seed-eu/prod-a/etcd-snapshot-save.db", bytes.NewReader(raw), int64(len(raw)), minio.PutObjectOptions{})
	require.NoError(t, err)
	written := time.Now()

	var found map[backup.Kind]destination.Entry
	require.Eventually(t, func() bool {
		found = map[backup.Kind]destination.Entry{}
		for _, e := range r.Entries("prod-a") {
			found[e.Kind] = e
		}
		return len(found) == 2
	}, waitFor, 10*time.Millisecond)
	assert.Equal(t, res.ID, found[backup.KindBackup].ID)
	assert.Equal(t, "eu", found[backup.KindBackup].Destination)
	assert.Equal(t, "etcd-snapshot-save.db", found[backup.KindLegacy].ID)
	assert.Equal(t, int64(len(raw)), found[backup.KindLegacy].Size)
	t.Logf("picked up after %v (poll interval %v)", time.Since(written), poll)
	var added []string
	for _, e := range obs.of(destination.InventoryChanged, "eu") {
		for _, a := range e.Added {
			added = append(added, string(a.Kind))
		}
	}
	assert.ElementsMatch(t, []string{"backup", "legacy"}, added)

	// The legacy snapshot restores: read it back through the destination.
	eu, err := r.Get("eu")
	require.NoError(t, err)
	rc, err := eu.Get(ctx, found[backup.KindLegacy].Key)
	require.NoError(t, err)
	got, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	assert.Equal(t, raw, got)

	// The destination goes: its inventory with it, its objects stay.
	ch, err := r.Apply(ctx, destination.Desired{Destinations: []destination.Spec{{Name: "local", URL: "file://" + localDir(t, r)}}})
	require.NoError(t, err)
	assert.Equal(t, []string{"eu"}, ch.Removed)
	_, err = r.Inventory("eu")
	require.ErrorIs(t, err, destination.ErrNotFound)
	assert.Empty(t, r.Entries("prod-a"))
	assert.Empty(t, eu.Inventory().Entries)
	var keys []string
	for obj := range srv.Client(t).ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		require.NoError(t, obj.Err)
		keys = append(keys, obj.Key)
	}
	assert.Len(t, keys, 3, "data, manifest and the legacy snapshot remain: %v", keys)
}

func localDir(t *testing.T, r *destination.Registry) string {
	t.Helper()
	d, err := r.Get("local")
	require.NoError(t, err)
	return d.Location().Dir
}

// Rotating credentials swaps the client without disturbing a backup under
// way: it finishes, manifest included, on the client it started with, even
// when the new credentials are wrong; the inventory is kept.
func TestCredentialRotationWithMinIO(t *testing.T) {
	srv := miniotest.Start(t)
	ctx := testCtx(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{})
	secrets := destination.StaticSecrets{"minio": {AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey()}}
	r := newRegistry(t, destination.Options{Secrets: destination.SecretResolverFunc(func(ctx context.Context, d, s string) (*credentials.Credentials, error) {
		return secrets.ResolveSecret(ctx, d, s)
	}), PartSize: s3.MinPartSize, PartsInFlight: 2})
	spec := destination.Spec{Name: "eu", URL: fmt.Sprintf("s3://%s?endpoint=%s&insecure=true&region=us-east-1", bucket, srv.Endpoint()),
		Credentials: destination.Credentials{Source: destination.SourceSecret, Secret: "minio", Revision: "1"}}
	eu, err := r.Add(ctx, spec)
	require.NoError(t, err)
	runBackup(t, ctx, "prod-a", "first", 1, eu.Target())
	_, err = r.Sync(ctx, "eu")
	require.NoError(t, err)

	// A 12 MiB snapshot: several parts, held halfway.
	snap := &snapshotter{stream: rawSnapshot(12<<20/512, 2), gate: make(chan struct{}), reached: make(chan struct{})}
	finish := holdBackup(ctx, &backup.Pipeline{Snapshotter: snap, Compression: backup.None}, snap, "rotating", eu.Target())

	// Rotate to credentials that do not work.
	secrets["minio"] = destination.Keys{AccessKey: srv.AccessKey(), SecretKey: "not-the-secret"}
	spec.Credentials.Revision = "2"
	ch, err := r.Apply(ctx, destination.Desired{Destinations: []destination.Spec{spec}})
	require.NoError(t, err)
	assert.Equal(t, []string{"eu"}, ch.Updated)
	st, err := r.Check(ctx, "eu")
	require.NoError(t, err)
	assert.Equal(t, destination.ReasonAuth, st.Reason, "new requests use the new credentials")

	res, err := finish()
	require.NoError(t, err, "the backup under way finished on its own client")
	assert.Len(t, eu.Inventory().Entries, 2, "the inventory survived the rotation, and shows the backup committed meanwhile")

	// Rotate back: the backup is there, complete.
	secrets["minio"] = destination.Keys{AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey()}
	_, err = r.Update(ctx, "eu", spec)
	require.NoError(t, err)
	entries, err := backup.ListBackups(ctx, eu, "prod-a")
	require.NoError(t, err)
	require.Len(t, entries, 2)
	assert.Equal(t, backup.KindBackup, entries[1].Kind)
	assert.Equal(t, res.ID, entries[1].ID)
	uploads, err := srv.IncompleteUploads(ctx, bucket)
	require.NoError(t, err)
	assert.Empty(t, uploads)
}

// Object-lock defaults lock what a backup writes; SSE is asked for.
func TestObjectLockAndEncryptionWithMinIO(t *testing.T) {
	srv := miniotest.Start(t)
	ctx := testCtx(t)
	bucket := srv.NewBucket(t, miniotest.BucketOptions{ObjectLocking: true})
	plain := srv.NewBucket(t, miniotest.BucketOptions{})
	now := time.Now().UTC().Truncate(time.Second)
	r := newRegistry(t, destination.Options{
		Secrets: destination.StaticSecrets{"minio": {AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey()}},
		Now:     func() time.Time { return now },
	})
	creds := destination.Credentials{Source: destination.SourceSecret, Secret: "minio"}
	locked, err := r.Add(ctx, destination.Spec{Name: "locked", Credentials: creds,
		URL:        fmt.Sprintf("s3://%s?endpoint=%s&insecure=true&region=us-east-1", bucket, srv.Endpoint()),
		ObjectLock: destination.ObjectLock{Mode: storage.Governance, RetainFor: 48 * time.Hour},
		Encryption: s3.SSE{Mode: s3.SSES3},
	})
	require.NoError(t, err)
	res := runBackup(t, ctx, "prod-a", "nightly", 1, locked.Target())
	m := res.Outcomes[0].Manifest
	for _, key := range []string{backup.ClusterPrefix("prod-a") + m.DataKey, backup.ClusterPrefix("prod-a") + backup.ManifestKey(m.DataKey)} {
		ret, err := locked.Retention(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, storage.Governance, ret.Mode, key)
		assert.WithinDuration(t, now.Add(48*time.Hour), ret.Until, time.Second, key)
		info, err := srv.Client(t).StatObject(ctx, bucket, key, minio.StatObjectOptions{})
		require.NoError(t, err)
		assert.Equal(t, "AES256", info.Metadata.Get("X-Amz-Server-Side-Encryption"), key)
	}

	// On a bucket without object lock, the backup fails and leaves nothing.
	unlockable, err := r.Add(ctx, destination.Spec{Name: "unlockable", Credentials: creds,
		URL:        fmt.Sprintf("s3://%s?endpoint=%s&insecure=true&region=us-east-1", plain, srv.Endpoint()),
		ObjectLock: destination.ObjectLock{Mode: storage.Governance, RetainFor: time.Hour},
	})
	require.NoError(t, err)
	p := backup.Pipeline{Snapshotter: &snapshotter{stream: rawSnapshot(8, 1)}}
	_, err = p.Run(ctx, backup.Request{Cluster: "prod-a", Name: "nightly", Targets: []backup.Target{unlockable.Target()}})
	require.ErrorIs(t, err, storage.ErrUnsupported)
	for obj := range srv.Client(t).ListObjects(ctx, plain, minio.ListObjectsOptions{Recursive: true}) {
		t.Errorf("left behind: %s %v", obj.Key, obj.Err)
	}
}
