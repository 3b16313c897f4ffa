package schedule

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/memblob"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// streamSnapshotter serves small valid snapshot streams and counts them.
type streamSnapshotter struct{ calls atomic.Int64 }

func (s *streamSnapshotter) Snapshot(context.Context) (*backup.Snapshot, error) {
	n := s.calls.Add(1)
	body := bytes.Repeat([]byte{byte(n)}, 8*512)
	sum := sha256.Sum256(body)
	stream := append(body, sum[:]...)
	return backup.NewSnapshot(io.NopCloser(bytes.NewReader(stream)), backup.SnapshotInfo{RevisionLow: n}, nil), nil
}

// readOnlyUploader is an uploader whose destination refuses writes.
type readOnlyUploader struct{ backup.Uploader }

func (readOnlyUploader) ReadOnly() bool { return true }

// memDestinations are named in-memory buckets.
type memDestinations map[string]storage.Bucket

func newMemDestinations(t *testing.T, names ...string) memDestinations {
	d := memDestinations{}
	for _, n := range names {
		gb := memblob.OpenBucket(nil)
		t.Cleanup(func() { _ = gb.Close() })
		d[n] = blob.New(gb, nil)
	}
	return d
}

func (d memDestinations) bucket(name string) (storage.Bucket, error) {
	b, ok := d[name]
	if !ok {
		return nil, errors.New("no such destination")
	}
	return b, nil
}

func (d memDestinations) runner(snap backup.Snapshotter, now func() time.Time) *PipelineRunner {
	return &PipelineRunner{
		Snapshotter: func(context.Context, string) (backup.Snapshotter, error) { return snap, nil },
		Uploader: func(_ context.Context, name string) (backup.Uploader, error) {
			b, err := d.bucket(name)
			if err != nil {
				return nil, err
			}
			return &backup.BucketUploader{Bucket: b}, nil
		},
		Store: func(_ context.Context, name string) (retention.Store, error) { return d.bucket(name) },
		Now:   now,
	}
}

func (d memDestinations) inventory() *CatalogInventory {
	return &CatalogInventory{Catalog: func(_ context.Context, name string) (backup.Catalog, error) { return d.bucket(name) }}
}

func backupsOf(t *testing.T, b storage.Bucket, cluster string) []backup.Entry {
	t.Helper()
	entries, err := backup.ListBackups(t.Context(), b, cluster)
	require.NoError(t, err)
	var out []backup.Entry
	for _, e := range entries {
		if e.Kind == backup.KindBackup {
			out = append(out, e)
		}
	}
	return out
}

func TestPipelineRunner(t *testing.T) {
	dests := newMemDestinations(t, "s3", "gcs")
	snap := &streamSnapshotter{}
	now := utc("2026-01-01T00:00:00Z")
	r := dests.runner(snap, func() time.Time { return now })
	var events []backup.Event
	r.Observer = backup.ObserverFunc(func(e backup.Event) { events = append(events, e) })
	inv := dests.inventory()
	ctx := t.Context()

	j := Job{ID: "ns/a", Schedule: "@hourly", Cluster: "prod-a", Name: "hourly", Destinations: []string{"s3", "gcs"},
		Compression: backup.Gzip, Retention: retention.KeepLast(2)}
	_, ok, err := inv.LastBackup(ctx, j)
	require.NoError(t, err)
	assert.False(t, ok, "no backup yet")

	for i := range 4 {
		now = utc("2026-01-01T00:00:00Z").Add(time.Duration(i) * time.Hour)
		require.NoError(t, r.Backup(ctx, j, now))
		require.NoError(t, r.Prune(ctx, j))
	}
	require.NotEmpty(t, events)
	for _, e := range events {
		require.Equal(t, j.ID, e.Job, "every event names the job (%s)", e.Kind)
	}
	for _, name := range j.Destinations {
		got := backupsOf(t, dests[name], "prod-a")
		require.Len(t, got, 2, name)
		assert.Equal(t, "prod-a-hourly-20260101T030000.000Z", got[1].ID)
		assert.Equal(t, backup.Gzip, got[1].Compression)
		assert.Equal(t, name, got[1].Manifest.Destination)
	}
	last, ok, err := inv.LastBackup(ctx, j)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, utc("2026-01-01T03:00:00Z"), last.UTC())

	// Another backup name of the same cluster is not the job's.
	other := j
	other.Name = "nightly"
	_, ok, err = inv.LastBackup(ctx, other)
	require.NoError(t, err)
	assert.False(t, ok)

	// A destination missing the backup makes it missing.
	dests["empty"] = newMemDestinations(t, "empty")["empty"]
	partial := j
	partial.Destinations = []string{"s3", "empty"}
	_, ok, err = inv.LastBackup(ctx, partial)
	require.NoError(t, err)
	assert.False(t, ok)

	// A one-shot backup is named without a timestamp, and only once.
	once := Job{ID: "ns/once", Cluster: "prod-a", Name: "before-upgrade", Destinations: []string{"s3"}}
	require.NoError(t, r.Backup(ctx, once, time.Time{}))
	ids := []string{}
	for _, e := range backupsOf(t, dests["s3"], "prod-a") {
		ids = append(ids, e.ID)
	}
	assert.Contains(t, ids, "prod-a-before-upgrade")
	assert.ErrorIs(t, r.Backup(ctx, once, time.Time{}), backup.ErrBackupExists)

	// An unknown destination fails before the snapshot.
	calls := snap.calls.Load()
	lost := j
	lost.Destinations = []string{"nowhere"}
	assert.ErrorContains(t, r.Backup(ctx, lost, now), "destination nowhere")
	assert.ErrorContains(t, r.Prune(ctx, lost), "destination nowhere")
	assert.Equal(t, calls, snap.calls.Load())
}

func TestPipelineRunnerRefusesReadOnly(t *testing.T) {
	snap := &streamSnapshotter{}
	r := &PipelineRunner{
		Snapshotter: func(context.Context, string) (backup.Snapshotter, error) { return snap, nil },
		Uploader: func(context.Context, string) (backup.Uploader, error) {
			return readOnlyUploader{}, nil
		},
		Store: func(context.Context, string) (retention.Store, error) { return nil, errors.New("unused") },
	}
	err := r.Backup(t.Context(), job("j", "@daily"), time.Time{})
	require.ErrorIs(t, err, storage.ErrReadOnly)
	assert.Zero(t, snap.calls.Load(), "no snapshot taken")
}

func TestPipelineRunnerValidate(t *testing.T) {
	var r PipelineRunner
	err := r.Validate()
	require.Error(t, err)
	for _, f := range []string{"Snapshotter", "Uploader", "Store"} {
		assert.ErrorContains(t, err, f)
	}
	assert.Error(t, r.Backup(t.Context(), job("j", ""), time.Time{}))
	assert.Error(t, r.Prune(t.Context(), job("j", "")))
	_, _, err = (&CatalogInventory{}).LastBackup(t.Context(), job("j", ""))
	assert.Error(t, err)
}

// TestSchedulerWithPipeline runs the scheduler on the pipeline runner and
// the catalog inventory: hourly backups, pruned to the last two, and a
// catch-up after a restart that found the last backup too old.
func TestSchedulerWithPipeline(t *testing.T) {
	noLeaks(t)
	dests := newMemDestinations(t, "s3")
	start := utc("2026-01-01T00:30:00Z")
	h := newHarness(t, start, Config{})
	h.s.runner = dests.runner(&streamSnapshotter{}, h.clk.Now)
	h.s.inventory = dests.inventory()
	j := Job{ID: "ns/a", Schedule: "@hourly", Cluster: "prod-a", Name: "hourly", Destinations: []string{"s3"}, Retention: retention.KeepLast(2)}
	require.NoError(t, h.s.Set(j))
	h.start()
	st := h.status("ns/a")
	assert.EqualValues(t, 1, st.Successes, "never backed up: a catch-up run at start")
	for _, at := range []string{"2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z", "2026-01-01T03:00:00Z"} {
		h.advanceTo(utc(at))
	}
	st = h.status("ns/a")
	require.NoError(t, st.LastError)
	require.NoError(t, st.LastPruneError)
	assert.EqualValues(t, 4, st.Successes)
	got := backupsOf(t, dests["s3"], "prod-a")
	require.Len(t, got, 2)
	assert.Equal(t, "prod-a-hourly-20260101T030000.000Z", got[1].ID)
	require.NoError(t, h.stop())

	// Down from 03:00 to 05:20: at the next start, one run right away.
	h.clk.Set(utc("2026-01-01T05:20:00Z"))
	h.start()
	st = h.status("ns/a")
	assert.EqualValues(t, 5, st.Successes)
	assert.Equal(t, utc("2026-01-01T04:00:00Z"), st.LastTick.UTC())
	got = backupsOf(t, dests["s3"], "prod-a")
	assert.Equal(t, "prod-a-hourly-20260101T052000.000Z", got[len(got)-1].ID)
	require.NoError(t, h.stop())
}
