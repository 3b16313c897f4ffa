package destination_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/storage"
)

// A destination is a backup target and a catalog: what a pipeline writes
// through it, backup.ListBackups finds through it.
func TestDestinationBackupAndList(t *testing.T) {
	ctx := testCtx(t)
	r := newRegistry(t, destination.Options{})
	eu, err := r.Add(ctx, mem("eu", "mem://shared/eu"))
	require.NoError(t, err)
	us, err := r.Add(ctx, destination.Spec{Name: "us", URL: "file://" + t.TempDir()})
	require.NoError(t, err)

	res := runBackup(t, ctx, "prod-a", "nightly", 1, eu.Target(), us.Target())
	assert.ElementsMatch(t, []string{"eu", "us"}, res.Succeeded())

	for _, d := range []*destination.Destination{eu, us} {
		entries, err := backup.ListBackups(ctx, d, "prod-a")
		require.NoError(t, err)
		require.Len(t, entries, 1, d.Name())
		assert.Equal(t, backup.KindBackup, entries[0].Kind)
		assert.Equal(t, d.Name(), entries[0].Manifest.Destination)
	}

	// The destination is confined to its prefix: the shared bucket holds
	// the backup under "eu/", and a destination at its root would see it
	// there.
	require.NoError(t, r.SetDefault("us"))
	require.NoError(t, r.Remove("eu"))
	root, err := r.Add(ctx, mem("root", "mem://shared"))
	require.NoError(t, err)
	var keys []string
	for info, err := range root.List(ctx, "") {
		require.NoError(t, err)
		keys = append(keys, info.Key)
	}
	require.Len(t, keys, 2)
	assert.True(t, strings.HasPrefix(keys[0], "eu/prod-a/"), keys[0])
}

func TestReadOnlyDestination(t *testing.T) {
	ctx := testCtx(t)
	r := newRegistry(t, destination.Options{})
	rw, err := r.Add(ctx, mem("rw", "mem://archive/rw"))
	require.NoError(t, err)
	runBackup(t, ctx, "prod-a", "nightly", 1, rw.Target())
	require.NoError(t, rw.Put(ctx, "prod-a/legacy.db", bytes.NewReader(rawSnapshot(2, 9)), nil))

	require.NoError(t, r.SetDefault("rw"))
	ro, err := r.Add(ctx, destination.Spec{Name: "ro", URL: "mem://archive/ro", ReadOnly: true})
	require.NoError(t, err)
	// Point the read-only destination at the written data.
	_, err = r.Apply(ctx, destination.Desired{Destinations: []destination.Spec{
		{Name: "rw", URL: "mem://other"},
		{Name: "ro", URL: "mem://archive/rw", ReadOnly: true},
	}})
	require.NoError(t, err)
	require.True(t, ro.ReadOnly())

	entries, err := backup.ListBackups(ctx, ro, "prod-a")
	require.NoError(t, err, "restore still lists")
	require.Len(t, entries, 2)
	var key string
	for _, e := range entries {
		require.True(t, e.Restorable())
		if e.Kind == backup.KindBackup {
			key = e.Key
		}
	}
	rc, err := ro.Get(ctx, key)
	require.NoError(t, err, "restore still reads")
	_, err = io.Copy(io.Discard, rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	_, err = ro.Stat(ctx, key)
	require.NoError(t, err)

	writes := map[string]func() error{
		"put":           func() error { return ro.Put(ctx, "prod-a/x", strings.NewReader("x"), nil) },
		"put if absent": func() error { return ro.PutIfAbsent(ctx, "prod-a/x", strings.NewReader("x"), nil) },
		"delete":        func() error { return ro.Delete(ctx, key) },
		"set retention": func() error {
			return ro.SetRetention(ctx, key, storage.Retention{Mode: storage.Governance, Until: time.Now().Add(time.Hour)})
		},
		"abort upload": func() error { return ro.AbortUpload(ctx, storage.Upload{Key: key, ID: "1"}) },
		"upload": func() error {
			return ro.Upload(ctx, &backup.Manifest{Cluster: "prod-a", DataKey: "x.db"}, strings.NewReader("x"))
		},
		"commit": func() error { return ro.Commit(ctx, &backup.Manifest{Cluster: "prod-a", DataKey: "x.db"}) },
		"backup": func() error {
			p := backup.Pipeline{Snapshotter: &snapshotter{stream: rawSnapshot(4, 2)}}
			_, err := p.Run(ctx, backup.Request{Cluster: "prod-a", Name: "again", Targets: []backup.Target{ro.Target()}})
			return err
		},
	}
	for name, write := range writes {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, write(), destination.ErrReadOnly)
		})
	}
	entries, err = backup.ListBackups(ctx, ro, "prod-a")
	require.NoError(t, err)
	assert.Len(t, entries, 2, "nothing was written or deleted")
}

// A backup under way when its destination moves to another bucket
// finishes in the bucket it started in, manifest included.
func TestInFlightBackupKeepsItsBucket(t *testing.T) {
	ctx := testCtx(t)
	r := newRegistry(t, destination.Options{})
	eu, err := r.Add(ctx, mem("eu", "mem://old"))
	require.NoError(t, err)

	snap := &snapshotter{stream: rawSnapshot(64, 3), gate: make(chan struct{}), reached: make(chan struct{})}
	finish := holdBackup(ctx, &backup.Pipeline{Snapshotter: snap, Compression: backup.None}, snap, "moving", eu.Target())
	_, err = r.Update(ctx, "eu", mem("eu", "mem://new"))
	require.NoError(t, err)
	res, err := finish()
	require.NoError(t, err)

	entries, err := backup.ListBackups(ctx, eu, "prod-a")
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing went to the new bucket")

	old, err := r.Add(ctx, mem("old", "mem://old"))
	require.NoError(t, err)
	entries, err = backup.ListBackups(ctx, old, "prod-a")
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, backup.KindBackup, entries[0].Kind, "data and manifest both in the old bucket")
	assert.Equal(t, res.Stored.Size, entries[0].Size)
}

// A backup under way when its destination is removed finishes; the
// destination then refuses new work.
func TestInFlightBackupOnRemovedDestination(t *testing.T) {
	ctx := testCtx(t)
	r := newRegistry(t, destination.Options{})
	_, err := r.Add(ctx, mem("base", "mem://base"))
	require.NoError(t, err)
	gone, err := r.Add(ctx, mem("gone", "mem://gone"))
	require.NoError(t, err)

	snap := &snapshotter{stream: rawSnapshot(64, 3), gate: make(chan struct{}), reached: make(chan struct{})}
	finish := holdBackup(ctx, &backup.Pipeline{Snapshotter: snap}, snap, "leaving", gone.Target())
	require.NoError(t, r.Remove("gone"))
	_, err = finish()
	require.NoError(t, err)
	_, err = gone.Stat(ctx, "x")
	require.ErrorIs(t, err, destination.ErrNotFound)

	again, err := r.Add(ctx, mem("again", "mem://gone"))
	require.NoError(t, err)
	entries, err := backup.ListBackups(ctx, again, "prod-a")
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, backup.KindBackup, entries[0].Kind)
}

// holdBackup runs p, whose snapshotter is snap (with a gate), to target in
// a goroutine of cluster "prod-a" and returns once the snapshot is half read
// and the target's Upload reads: a backup under way, to change its
// destination under. (The pipeline starts uploads in goroutines of their
// own, maybe after the snapshot is half read: waiting for the snapshot
// alone would race.) finish lets the snapshot end and returns the result.
func holdBackup(ctx context.Context, p *backup.Pipeline, snap *snapshotter, name string, target backup.Target) (finish func() (*backup.Result, error)) {
	u := &readingUploader{Uploader: target.Uploader, reading: make(chan struct{})}
	target.Uploader = u
	type result struct {
		res *backup.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := p.Run(ctx, backup.Request{Cluster: "prod-a", Name: name, Targets: []backup.Target{target}})
		done <- result{res, err}
	}()
	<-snap.reached
	<-u.reading
	return func() (*backup.Result, error) {
		close(snap.gate)
		got := <-done
		return got.res, got.err
	}
}

// readingUploader closes reading when its Upload first reads its input.
type readingUploader struct {
	backup.Uploader
	reading chan struct{}
	once    sync.Once
}

func (u *readingUploader) Upload(ctx context.Context, m *backup.Manifest, r io.Reader) error {
	return u.Uploader.Upload(ctx, m, readerFunc(func(p []byte) (int, error) {
		u.once.Do(func() { close(u.reading) })
		return r.Read(p)
	}))
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// A destination that cannot be opened is registered all the same, shows
// why, refuses work with ErrUnavailable, and is opened at the next check
// once the trouble is gone.
func TestUnopenedDestination(t *testing.T) {
	ctx := testCtx(t)
	dir := filepath.Join(t.TempDir(), "not-yet")
	r := newRegistry(t, destination.Options{})
	d, err := r.Add(ctx, destination.Spec{Name: "local", URL: "file://" + dir})
	require.NoError(t, err)
	st := d.Status()
	assert.Equal(t, destination.StateUnavailable, st.State)
	assert.Equal(t, destination.ReasonMissingBucket, st.Reason)
	assert.Equal(t, 1, st.ConsecutiveFailures)
	_, err = d.Stat(ctx, "x")
	require.ErrorIs(t, err, destination.ErrUnavailable)
	_, err = backup.ListBackups(ctx, d, "prod-a")
	require.ErrorIs(t, err, destination.ErrUnavailable)

	st, err = r.Check(ctx, "local")
	require.NoError(t, err)
	assert.Equal(t, 2, st.ConsecutiveFailures)

	require.NoError(t, os.MkdirAll(dir, 0o700))
	st, err = r.Check(ctx, "local")
	require.NoError(t, err)
	assert.True(t, st.Available(), st.Message)
	assert.Zero(t, st.ConsecutiveFailures)
	runBackup(t, ctx, "prod-a", "late", 4, d.Target())
}

// A removed destination refuses new work; nothing is deleted from its
// store.
func TestRemovedDestination(t *testing.T) {
	ctx := testCtx(t)
	r := newRegistry(t, destination.Options{})
	_, err := r.Add(ctx, mem("base", "mem://base"))
	require.NoError(t, err)
	gone, err := r.Add(ctx, mem("gone", "mem://gone"))
	require.NoError(t, err)
	runBackup(t, ctx, "prod-a", "nightly", 1, gone.Target())
	require.NoError(t, r.Remove("gone"))
	_, err = gone.Stat(ctx, "x")
	require.ErrorIs(t, err, destination.ErrNotFound)

	again, err := r.Add(ctx, mem("again", "mem://gone"))
	require.NoError(t, err)
	entries, err := backup.ListBackups(ctx, again, "prod-a")
	require.NoError(t, err)
	assert.Len(t, entries, 1, "the backup is still there")
}

func TestKeysAreRedacted(t *testing.T) {
	k := destination.Keys{AccessKey: "AKIAEXAMPLE", SecretKey: "s3cr3t-value", SessionToken: "tok3n-value"}
	var logs logBuffer
	logs.logger().Info("keys", "keys", k)
	for _, s := range []string{fmt.Sprintf("%v %+v %#v %s", k, k, k, k), logs.String()} {
		assert.NotContains(t, s, "s3cr3t")
		assert.NotContains(t, s, "tok3n")
		assert.NotContains(t, s, "AKIA")
	}
}
