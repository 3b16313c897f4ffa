package restore_test

import (
	"context"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// A prune that runs while a restore reads a backup it would delete skips
// that backup when both share a PinSet; the restore succeeds, and the next
// prune deletes the backup. The same holds for Fetch and Drill.
func TestRestorePinsTheBackupItReads(t *testing.T) {
	b := memBucket(t)
	created := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	ms := hourlyBackups(t, b, created, 2)
	ids := []string{ms[0].ID, ms[1].ID}
	sources := []restore.Source{{Name: "mem", Catalog: b}}
	older, err := restore.Find(t.Context(), sources, restore.Query{Cluster: "prod-a", ID: ids[0]})
	require.NoError(t, err)

	var pins retention.PinSet
	pruner := &retention.Pruner{Store: b, Destination: "mem", Policy: retention.KeepLast(1), Pins: &pins,
		Now: func() time.Time { return created.Add(2 * time.Hour) }}

	ops := []struct {
		name string
		run  func(ctx context.Context, r *restore.Restorer, dir string) error
	}{
		{"Fetch", func(ctx context.Context, r *restore.Restorer, dir string) error {
			_, err := r.Fetch(ctx, older, filepath.Join(dir, "snapshot.db"))
			return err
		}},
		{"Restore", func(ctx context.Context, r *restore.Restorer, dir string) error {
			_, err := r.Restore(ctx, older, restore.Member{Name: "m", DataDir: filepath.Join(dir, "data"), PeerURLs: []string{"http://127.0.0.1:2380"}})
			return err
		}},
		{"Drill", func(ctx context.Context, r *restore.Restorer, dir string) error {
			_, err := r.Drill(ctx, older)
			return err
		}},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			var (
				mu      sync.Mutex
				pinned  []bool
				reports []*retention.Report
			)
			observe := restore.ObserverFunc(func(e restore.Event) {
				mu.Lock()
				defer mu.Unlock()
				pinned = append(pinned, pins.Pinned("prod-a", ids[0]))
				if e.Kind == restore.Started {
					report, err := pruner.Prune(context.Background(), "prod-a")
					assert.NoError(t, err)
					reports = append(reports, report)
				}
			})
			r := &restore.Restorer{Observer: observe, Pins: &pins, TempDir: t.TempDir()}
			require.NoError(t, op.run(t.Context(), r, t.TempDir()))
			assert.False(t, pins.Pinned("prod-a", ids[0]), "released when the operation returns")
			require.NotEmpty(t, pinned)
			assert.False(t, slices.Contains(pinned, false), "pinned at every event: %v", pinned)
			require.Len(t, reports, 1)
			assert.Equal(t, 0, reports[0].Count(retention.Deleted))
			assert.Equal(t, 1, reports[0].Count(retention.Skipped))
		})
	}

	report, err := pruner.Prune(t.Context(), "prod-a")
	require.NoError(t, err)
	assert.Equal(t, 1, report.Count(retention.Deleted), "unpinned, the older backup goes")
	_, err = restore.Find(t.Context(), sources, restore.Query{Cluster: "prod-a", ID: ids[0]})
	require.ErrorIs(t, err, restore.ErrNoBackup)
}

// vanishing deletes the backup whose data key is key, manifest and data,
// on the first Get of that key, as a prune running between Find and a
// drill would.
type vanishing struct {
	*blob.Bucket
	key  string
	once sync.Once
}

func (v *vanishing) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if key == v.key {
		v.once.Do(func() {
			_ = v.Bucket.Delete(ctx, backup.ManifestKey(key))
			_ = v.Bucket.Delete(ctx, key)
		})
	}
	return v.Bucket.Get(ctx, key)
}

// A backup that a prune deleted after DrillJob found it is not a failed
// drill: the job drills the newest backup left.
func TestDrillJobDrillsTheNewestLeft(t *testing.T) {
	b := memBucket(t)
	ms := hourlyBackups(t, b, time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC), 2)
	catalog := &vanishing{Bucket: b, key: "prod-a/" + ms[1].DataKey}
	sources := []restore.Source{{Name: "mem", Catalog: catalog}}

	var got []*restore.DrillResult
	r := &restore.Restorer{TempDir: t.TempDir()}
	err := r.DrillJob(sources, restore.Query{Cluster: "prod-a"}, func(_ context.Context, res *restore.DrillResult) {
		got = append(got, res)
	})(t.Context())
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.True(t, got[0].Passed())
	assert.Equal(t, ms[0].ID, got[0].ID, "the older backup, the newest left")

	// Asked for that backup by ID, the job does not drill another one.
	catalog = &vanishing{Bucket: b, key: "prod-a/" + ms[0].DataKey}
	sources = []restore.Source{{Name: "mem", Catalog: catalog}}
	err = r.DrillJob(sources, restore.Query{Cluster: "prod-a", ID: ms[0].ID}, nil)(t.Context())
	require.ErrorIs(t, err, storage.ErrNotFound)
}

// hourlyBackups writes n scheduled backups of prod-a of a small snapshot to
// b, an hour apart from first.
func hourlyBackups(t *testing.T, b storage.Bucket, first time.Time, n int) []*backup.Manifest {
	t.Helper()
	snap := writeFile(t, "snapshot.db", smallSnapshot(t))
	var ms []*backup.Manifest
	for i := range n {
		at := first.Add(time.Duration(i) * time.Hour)
		p := &backup.Pipeline{Snapshotter: fileSnapshotter{snap}, Now: func() time.Time { return at }}
		res, err := p.Run(t.Context(), backup.Request{Cluster: "prod-a", Name: "hourly", Scheduled: true,
			Targets: []backup.Target{{Destination: "mem", Uploader: &backup.BucketUploader{Bucket: b}}}})
		require.NoError(t, err)
		ms = append(ms, res.Outcomes[0].Manifest)
	}
	return ms
}

// blockingDelete blocks the first Delete until release is closed, telling
// entered when it starts: a prune held in the middle of its deletes.
type blockingDelete struct {
	*blob.Bucket
	entered, release chan struct{}
	once             sync.Once
}

func (d *blockingDelete) Delete(ctx context.Context, key string) error {
	d.once.Do(func() {
		close(d.entered)
		<-d.release
	})
	return d.Bucket.Delete(ctx, key)
}

// TestCancelledRestoreStopsWaitingForAPrune: a restore whose backup a prune
// of the same process is deleting waits for the deletes before it pins the
// backup; cancelling the restore ends that wait at once, with the
// context's error and no pin left behind.
func TestCancelledRestoreStopsWaitingForAPrune(t *testing.T) {
	b := memBucket(t)
	created := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	ms := hourlyBackups(t, b, created, 2)
	older, err := restore.Find(t.Context(), []restore.Source{{Name: "mem", Catalog: b}}, restore.Query{Cluster: "prod-a", ID: ms[0].ID})
	require.NoError(t, err)

	var pins retention.PinSet
	store := &blockingDelete{Bucket: b, entered: make(chan struct{}), release: make(chan struct{})}
	pruner := &retention.Pruner{Store: store, Destination: "mem", Policy: retention.KeepLast(1), Pins: &pins,
		Now: func() time.Time { return created.Add(2 * time.Hour) }}
	pruned := make(chan *retention.Report, 1)
	go func() {
		report, err := pruner.Prune(context.Background(), "prod-a")
		assert.NoError(t, err)
		pruned <- report
	}()
	released := false
	release := func() {
		if !released {
			released = true
			close(store.release)
		}
	}
	t.Cleanup(release)
	select {
	case <-store.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the prune never deleted")
	}

	ctx, cancel := context.WithCancel(t.Context())
	fetched := make(chan error, 1)
	go func() {
		_, err := (&restore.Restorer{Pins: &pins, TempDir: t.TempDir()}).Fetch(ctx, older, filepath.Join(t.TempDir(), "snapshot.db"))
		fetched <- err
	}()
	cancel()
	select {
	case err := <-fetched:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(30 * time.Second):
		t.Fatal("the cancelled restore still waits for the prune's deletes")
	}
	require.False(t, pins.Pinned("prod-a", ms[0].ID), "no pin is left behind")

	release()
	select {
	case report := <-pruned:
		require.Equal(t, 1, report.Count(retention.Deleted))
	case <-time.After(30 * time.Second):
		t.Fatal("the prune never ended")
	}
}
