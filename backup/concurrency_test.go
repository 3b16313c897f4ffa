package backup_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/fileblob"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// raceBackups runs n pipelines of one cluster and config at once, all with
// the same clock, so that they compute the same ID, and returns their
// results and errors.
func raceBackups(t *testing.T, b storage.Bucket, n int) ([]*backup.Result, []error) {
	t.Helper()
	at := time.Date(2026, 11, 24, 19, 0, 0, 0, time.UTC)
	results, errs := make([]*backup.Result, n), make([]error, n)
	var start, wg sync.WaitGroup
	start.Add(1)
	for i := range n {
		p := &backup.Pipeline{Snapshotter: newSnapshotter(fakeSnapshot(t, 2000, uint64(i+1))), Now: func() time.Time { return at }}
		wg.Go(func() {
			start.Wait()
			results[i], errs[i] = p.Run(t.Context(), backup.Request{
				Cluster: "prod-a", Name: "hourly", Scheduled: true,
				Targets: []backup.Target{{Destination: "d", Uploader: &backup.BucketUploader{Bucket: b}}},
			})
		})
	}
	start.Done()
	wg.Wait()
	return results, errs
}

// requireCommittedIntact checks that every backup a run reported committed
// is listed, with a data object whose bytes match its manifest.
func requireCommittedIntact(t *testing.T, b storage.Bucket, results []*backup.Result, errs []error) int {
	t.Helper()
	entries, err := backup.ListBackups(t.Context(), b, "prod-a")
	require.NoError(t, err)
	listed := map[string]backup.Entry{}
	for _, e := range entries {
		require.Equal(t, backup.KindBackup, e.Kind, "nothing half-visible: %s is %s", e.Key, e.Kind)
		listed[e.ID] = e
	}
	committed := 0
	for i, res := range results {
		if errs[i] != nil {
			continue
		}
		committed++
		e, ok := listed[res.ID]
		require.True(t, ok, "run %d reported %s committed, but it is not listed", i, res.ID)
		stored := readObject(t, b, e.Key)
		require.Equal(t, e.Manifest.Stored.SHA256, sha256Hex(stored), "run %d: stored bytes of %s", i, res.ID)
	}
	require.Len(t, listed, committed, "every listed backup was reported committed by its run")
	return committed
}

// TestSameIDRace: runs that compute the same ID on one destination all
// commit: exactly one under the ID, each other one, finding it taken, under
// the ID with its run token; every backup keeps its own data.
func TestSameIDRace(t *testing.T) {
	srv := miniotest.Start(t)
	file, _ := newFile(t)
	for name, b := range map[string]storage.Bucket{
		"file":  file,
		"minio": newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{})),
	} {
		t.Run(name, func(t *testing.T) {
			require.True(t, storage.CanPutIfAbsent(b))
			results, errs := raceBackups(t, b, 4)
			require.NoError(t, errors.Join(errs...))
			require.Equal(t, 4, requireCommittedIntact(t, b, results, errs))
			plain := 0
			for _, res := range results {
				m := res.Outcomes[0].Manifest
				switch res.ID {
				case "prod-a-hourly-20261124T190000.000Z":
					plain++
				case "prod-a-hourly-20261124T190000.000Z-" + m.Run:
				default:
					t.Fatalf("unexpected ID %s", res.ID)
				}
			}
			require.Equal(t, 1, plain, "exactly one run takes the ID itself")
		})
	}
}

// TestUniqueIDsWithoutExclusiveCreate: on a bucket that cannot create
// exclusively, runs that would share an ID get IDs of their own, and
// every one commits.
func TestUniqueIDsWithoutExclusiveCreate(t *testing.T) {
	gb, err := fileblob.OpenBucket(t.TempDir(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = gb.Close() })
	b := blob.New(gb, nil) // no directory known: no exclusive create
	require.False(t, storage.CanPutIfAbsent(b))
	results, errs := raceBackups(t, b, 4)
	require.NoError(t, errors.Join(errs...))
	require.Equal(t, 4, requireCommittedIntact(t, b, results, errs))
	for _, res := range results {
		m := res.Outcomes[0].Manifest
		require.Equal(t, "prod-a-hourly-20261124T190000.000Z-"+m.Run, res.ID)
	}
}

func TestRemoveOwnDataNeedsProof(t *testing.T) {
	ctx := t.Context()
	b, _ := newFile(t)
	m := &backup.Manifest{Cluster: "prod-a", DataKey: "20261124T190000.000Z_prod-a-x.db", Run: "0123abcd"}
	key := "prod-a/" + m.DataKey
	other := &storage.PutOptions{Metadata: map[string]string{backup.MetadataRun: "ffffffff"}}
	require.NoError(t, b.Put(ctx, key, bytes.NewReader([]byte("another run's")), other))

	err := backup.RemoveOwnData(ctx, b, m)
	require.ErrorIs(t, err, backup.ErrNotOwnObject)
	assert.Equal(t, "another run's", string(readObject(t, b, key)), "another run's object is kept")

	noToken := *m
	noToken.Run = ""
	require.ErrorIs(t, backup.RemoveOwnData(ctx, b, &noToken), backup.ErrNotOwnObject)

	own := &storage.PutOptions{Metadata: map[string]string{backup.MetadataRun: m.Run}}
	require.NoError(t, b.Delete(ctx, key))
	require.NoError(t, b.Put(ctx, key, bytes.NewReader([]byte("ours")), own))
	require.NoError(t, backup.RemoveOwnData(ctx, b, m))
	_, err = b.Stat(ctx, key)
	require.ErrorIs(t, err, storage.ErrNotFound)
	require.NoError(t, backup.RemoveOwnData(ctx, b, m), "a missing object is not an error")
}

// TestFailedCommitRemovesOnlyItsOwnData: a commit that fails removes the
// data object its run wrote, and never one another run wrote under the
// same key.
func TestFailedCommitRemovesOnlyItsOwnData(t *testing.T) {
	ctx := t.Context()
	b, _ := newFile(t)
	u := &backup.BucketUploader{Bucket: b}
	m := &backup.Manifest{
		Format: backup.ManifestFormat, ID: "prod-a-x", Cluster: "prod-a", Name: "x", Created: time.Now().UTC(),
		DataKey: "20261124T190000.000Z_prod-a-x.db", Compression: backup.None, Run: "0123abcd",
		Raw: backup.Digest{SHA256: strings.Repeat("0", 64)}, Stored: backup.Digest{SHA256: strings.Repeat("0", 64)},
	}
	manifestKey := "prod-a/" + backup.ManifestKey(m.DataKey)
	require.NoError(t, b.Put(ctx, manifestKey, bytes.NewReader([]byte("{}")), nil))

	// Its own data object: removed when the commit fails.
	require.NoError(t, u.Upload(ctx, m, bytes.NewReader([]byte("ours"))))
	err := u.Commit(ctx, m)
	require.ErrorIs(t, err, backup.ErrBackupExists)
	_, err = b.Stat(ctx, "prod-a/"+m.DataKey)
	require.ErrorIs(t, err, storage.ErrNotFound, "the run removed its own data object")

	// Another run's data object under the same key: kept.
	other := *m
	other.Run = "ffffffff"
	require.NoError(t, u.Upload(ctx, &other, bytes.NewReader([]byte("theirs"))))
	err = u.Commit(ctx, m)
	require.ErrorIs(t, err, backup.ErrBackupExists)
	require.ErrorIs(t, err, backup.ErrNotOwnObject)
	assert.Equal(t, "theirs", string(readObject(t, b, "prod-a/"+m.DataKey)))
}

// gatedUploader reads the whole stream, waits for wait (if set), then
// uploads, and closes done once its upload has returned: it orders two
// runs' uploads to one destination.
type gatedUploader struct {
	*backup.BucketUploader
	wait, done chan struct{}
	once       sync.Once
}

func (g *gatedUploader) Upload(ctx context.Context, m *backup.Manifest, r io.Reader) error {
	body, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if g.wait != nil {
		<-g.wait
	}
	defer g.once.Do(func() { close(g.done) })
	return g.BucketUploader.Upload(ctx, m, bytes.NewReader(body))
}

// TestSameIDRaceAcrossTargets: two scheduled runs of one config in the
// same millisecond, with destinations A (file) and B (MinIO); the first
// run takes the ID on A, the second on B. Neither may commit where it
// won: A and B would hold different snapshots under one ID. A run that
// lost the ID anywhere gives it up and backs up again under an ID of its
// own, on both destinations; every ID names one snapshot everywhere.
func TestSameIDRaceAcrossTargets(t *testing.T) {
	srv := miniotest.Start(t)
	a, _ := newFile(t)
	b := newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{}))
	buckets := map[string]storage.Bucket{"a": a, "b": b}
	at := time.Date(2026, 11, 24, 19, 0, 0, 0, time.UTC)
	const plain = "prod-a-hourly-20261124T190000.000Z"

	// Run 1 uploads to A at once and to B after run 2 has; run 2 uploads
	// to B at once and to A after run 1 has.
	a1, b1 := &gatedUploader{done: make(chan struct{})}, &gatedUploader{done: make(chan struct{})}
	a2, b2 := &gatedUploader{done: make(chan struct{})}, &gatedUploader{done: make(chan struct{})}
	b1.wait, a2.wait = b2.done, a1.done
	results, errs := make([]*backup.Result, 2), make([]error, 2)
	var wg sync.WaitGroup
	for i, gates := range [][2]*gatedUploader{{a1, b1}, {a2, b2}} {
		gates[0].BucketUploader = &backup.BucketUploader{Bucket: a}
		gates[1].BucketUploader = &backup.BucketUploader{Bucket: b}
		p := &backup.Pipeline{Snapshotter: newSnapshotter(fakeSnapshot(t, 2000, uint64(i+1))), Now: func() time.Time { return at }}
		wg.Go(func() {
			results[i], errs[i] = p.Run(t.Context(), backup.Request{
				Cluster: "prod-a", Name: "hourly", Scheduled: true,
				Targets: []backup.Target{{Destination: "a", Uploader: gates[0]}, {Destination: "b", Uploader: gates[1]}},
			})
		})
	}
	wg.Wait()

	listed := map[string]map[string]*backup.Manifest{} // ID -> destination -> manifest
	for name, bucket := range buckets {
		entries, err := backup.ListBackups(t.Context(), bucket, "prod-a")
		require.NoError(t, err)
		for _, e := range entries {
			require.Equal(t, backup.KindBackup, e.Kind, "%s on %s: nothing half-visible or left behind", e.Key, name)
			if listed[e.ID] == nil {
				listed[e.ID] = map[string]*backup.Manifest{}
			}
			listed[e.ID][name] = e.Manifest
		}
	}
	for id, byDest := range listed {
		require.Len(t, byDest, 2, "%s is on both destinations", id)
		assert.Equal(t, byDest["a"].Run, byDest["b"].Run, "%s: one run's snapshot on every destination", id)
		assert.Equal(t, byDest["a"].Raw.SHA256, byDest["b"].Raw.SHA256, "%s: one snapshot on every destination", id)
	}
	require.NoError(t, errors.Join(errs...), "each run backs up again under an ID of its own")
	require.Len(t, listed, 2, "two backups, under two IDs")
	for _, res := range results {
		// A run whose other upload landed after the other run gave the ID
		// up (and removed its data) may hold the plain ID on both.
		run := res.Outcomes[0].Manifest.Run
		assert.Contains(t, []string{plain, plain + "-" + run}, res.ID)
		assert.Contains(t, listed, res.ID)
	}
}

// takenAtCommit is a BucketUploader whose manifest write is refused as
// taken, as after a lost reply whose read-back found another manifest.
type takenAtCommit struct{ *backup.BucketUploader }

func (u takenAtCommit) Commit(context.Context, *backup.Manifest) error {
	return fmt.Errorf("write manifest: %w", backup.ErrBackupExists)
}

// TestCommittedRunIsNotTakenAgain: a scheduled run that committed its ID
// on one target and met ErrBackupExists only at another's manifest write
// keeps that backup and is not run again under its token: a second backup
// would stand beside the first, unreported.
func TestCommittedRunIsNotTakenAgain(t *testing.T) {
	a, _ := newFile(t)
	b, _ := newFile(t)
	at := time.Date(2026, 11, 24, 19, 0, 0, 0, time.UTC)
	snap := newSnapshotter(fakeSnapshot(t, 200, 1))
	p := &backup.Pipeline{Snapshotter: snap, Now: func() time.Time { return at }}
	res, err := p.Run(t.Context(), backup.Request{
		Cluster: "prod-a", Name: "hourly", Scheduled: true,
		Targets: []backup.Target{
			{Destination: "a", Uploader: &backup.BucketUploader{Bucket: a}},
			{Destination: "b", Uploader: takenAtCommit{&backup.BucketUploader{Bucket: b}}},
		},
	})
	require.ErrorIs(t, err, backup.ErrBackupExists)
	require.Equal(t, "prod-a-hourly-20261124T190000.000Z", res.ID)
	require.NotNil(t, res.Outcomes[0].Manifest, "committed on a")
	require.Equal(t, 1, snap.calls, "one snapshot, no second run")
	entries, err := backup.ListBackups(t.Context(), a, "prod-a")
	require.NoError(t, err)
	require.Len(t, entries, 1)
}
