package backup_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/cleanup"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
)

// storeManifest is a valid manifest of a small data object.
func storeManifest(body string) *backup.Manifest {
	created := time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)
	return &backup.Manifest{
		Format: backup.ManifestFormat, ID: "prod-a-delta-11", Cluster: "prod-a", Name: "delta-11", Created: created,
		Completed: created, DataKey: "20261128T040000.000Z_prod-a-delta-11.db", Compression: backup.None, Run: "0123abcd",
		Raw:    backup.Digest{Size: int64(len(body)), SHA256: strings.Repeat("0", 64)},
		Stored: backup.Digest{Size: int64(len(body)), SHA256: strings.Repeat("0", 64)},
	}
}

// stagingLog wraps a file bucket's Stager and records, in order, each
// object's stage, and the start and end of each publish, by kind ("data"
// or "manifest"). before, when set, runs before a publish of that kind,
// with the publish's context;
// failStage fails the stage of that kind.
type stagingLog struct {
	*blob.Bucket
	pair      bool // PutThenStage, not Stage
	failStage string
	before    map[string]func(ctx context.Context)

	mu  sync.Mutex
	log []string
}

func kindOfKey(key string) string {
	if strings.HasSuffix(key, backup.ManifestSuffix) {
		return "manifest"
	}
	return "data"
}

func (s *stagingLog) record(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, e)
}

// PutThenStage is the file bucket's when pair is set, and records "stored
// data" and "staged manifest"; otherwise it is unsupported, and the store
// goes through Stage.
func (s *stagingLog) PutThenStage(ctx context.Context, first, second storage.StagePut) (storage.Staged, error) {
	if !s.pair {
		return nil, storage.Errorf("put", first.Key, storage.ErrUnsupported, nil)
	}
	for _, p := range []storage.StagePut{first, second} {
		if kind := kindOfKey(p.Key); s.failStage == kind {
			_, _ = io.Copy(io.Discard, p.Body)
			return nil, storage.Errorf("put", p.Key, storage.ErrNoSpace, nil)
		}
	}
	st, err := s.Bucket.PutThenStage(ctx, first, second)
	if err != nil {
		return nil, err
	}
	s.record("stored data")
	s.record("staged manifest")
	return &loggedStaged{Staged: st, s: s, kind: "manifest"}, nil
}

func (s *stagingLog) Stage(ctx context.Context, key string, r io.Reader, opts *storage.PutOptions) (storage.Staged, error) {
	kind := kindOfKey(key)
	if s.failStage == kind {
		_, _ = io.Copy(io.Discard, r)
		return nil, storage.Errorf("put", key, storage.ErrNoSpace, nil)
	}
	st, err := s.Bucket.Stage(ctx, key, r, opts)
	if err != nil {
		return nil, err
	}
	s.record("staged " + kind)
	return &loggedStaged{Staged: st, s: s, kind: kind}, nil
}

type loggedStaged struct {
	storage.Staged
	s    *stagingLog
	kind string
}

func (l *loggedStaged) Publish(ctx context.Context) error {
	if f := l.s.before[l.kind]; f != nil {
		f(ctx)
	}
	l.s.record("publish " + l.kind)
	err := l.Staged.Publish(ctx)
	l.s.record("published " + l.kind)
	return err
}

// filesIn lists the files under dir, relative, temporary ones included.
func filesIn(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		out = append(out, filepath.ToSlash(rel))
		return err
	}))
	return out
}

// requireStoredAsCommitted checks that b, in dir, holds the segment
// "segment" of m as Upload and Commit store it: the data object with the
// run's token, the manifest, their attributes, nothing else.
func requireStoredAsCommitted(t *testing.T, b *blob.Bucket, dir string, m *backup.Manifest) {
	t.Helper()
	assert.Equal(t, "segment", string(readObject(t, b, "prod-a/"+m.DataKey)))
	got, err := backup.ParseManifest(bytes.NewReader(readObject(t, b, "prod-a/"+backup.ManifestKey(m.DataKey))))
	require.NoError(t, err)
	assert.Equal(t, m.ID, got.ID)
	info, err := b.Stat(t.Context(), "prod-a/"+m.DataKey)
	require.NoError(t, err)
	assert.Equal(t, "0123abcd", info.Metadata[backup.MetadataRun], "the data object carries the run's token")
	assert.ElementsMatch(t, []string{"prod-a/" + m.DataKey, "prod-a/" + m.DataKey + ".attrs",
		"prod-a/" + backup.ManifestKey(m.DataKey), "prod-a/" + backup.ManifestKey(m.DataKey) + ".attrs"}, filesIn(t, dir))
}

// TestStoreStagesBothThenNamesInOrder: BucketUploader.Store on a file
// bucket writes and syncs the data object and the manifest before naming
// either, then names the data object, durably, before the manifest; what
// it stores is what Upload and Commit store.
func TestStoreStagesBothThenNamesInOrder(t *testing.T) {
	b, dir := newFile(t)
	s := &stagingLog{Bucket: b}
	m := storeManifest("segment")
	committing, err := (&backup.BucketUploader{Bucket: s}).Store(t.Context(), m, strings.NewReader("segment"))
	require.NoError(t, err)
	assert.True(t, committing)
	require.Len(t, s.log, 6, "%v", s.log)
	assert.ElementsMatch(t, []string{"staged data", "staged manifest"}, s.log[:2], "both staged before either is named: %v", s.log)
	assert.Equal(t, []string{"publish data", "published data", "publish manifest", "published manifest"}, s.log[2:])
	requireStoredAsCommitted(t, b, dir, m)
}

// TestStorePairStoresDataThenNamesManifest: on a bucket that has
// storage.PairStager (a file bucket), Store stores the data object and
// stages the manifest in one call, then names the manifest; what it
// stores is what Upload and Commit store.
func TestStorePairStoresDataThenNamesManifest(t *testing.T) {
	b, dir := newFile(t)
	s := &stagingLog{Bucket: b, pair: true}
	m := storeManifest("segment")
	committing, err := (&backup.BucketUploader{Bucket: s}).Store(t.Context(), m, strings.NewReader("segment"))
	require.NoError(t, err)
	assert.True(t, committing)
	assert.Equal(t, []string{"stored data", "staged manifest", "publish manifest", "published manifest"}, s.log)
	requireStoredAsCommitted(t, b, dir, m)
}

// TestStoreFailuresLeaveNothing: a stage that fails, a data key taken,
// and a manifest key taken between the stage and the name each fail the
// store with what Upload and Commit return, and leave no data object of
// the run and no temporary file; another run's objects are left alone.
func TestStoreFailuresLeaveNothing(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stageOnly  bool // a case of Stage and Publish of the data object
		setup      func(t *testing.T, b *blob.Bucket, s *stagingLog, m *backup.Manifest)
		committing bool
		is         error
		left       []string // keys left, besides nothing of the run
	}{
		{name: "manifest stage fails", is: storage.ErrNoSpace,
			setup: func(_ *testing.T, _ *blob.Bucket, s *stagingLog, _ *backup.Manifest) { s.failStage = "manifest" }},
		{name: "data stage fails", is: storage.ErrNoSpace,
			setup: func(_ *testing.T, _ *blob.Bucket, s *stagingLog, _ *backup.Manifest) { s.failStage = "data" }},
		{name: "data key taken", is: backup.ErrBackupExists, left: []string{"data"},
			setup: func(t *testing.T, b *blob.Bucket, _ *stagingLog, m *backup.Manifest) {
				require.NoError(t, b.Put(t.Context(), "prod-a/"+m.DataKey, strings.NewReader("theirs"), nil))
			}},
		{name: "data key taken after staging", stageOnly: true, is: backup.ErrBackupExists, left: []string{"data"},
			setup: func(t *testing.T, b *blob.Bucket, s *stagingLog, m *backup.Manifest) {
				s.before = map[string]func(context.Context){"data": func(context.Context) {
					require.NoError(t, b.Put(t.Context(), "prod-a/"+m.DataKey, strings.NewReader("theirs"), nil))
				}}
			}},
		{name: "manifest key taken", is: backup.ErrBackupExists, left: []string{"manifest"},
			setup: func(t *testing.T, b *blob.Bucket, _ *stagingLog, m *backup.Manifest) {
				require.NoError(t, b.Put(t.Context(), "prod-a/"+backup.ManifestKey(m.DataKey), strings.NewReader("{}"), nil))
			}},
		{name: "manifest key taken after staging", committing: true, is: backup.ErrBackupExists, left: []string{"manifest"},
			setup: func(t *testing.T, b *blob.Bucket, s *stagingLog, m *backup.Manifest) {
				s.before = map[string]func(context.Context){"manifest": func(context.Context) {
					require.NoError(t, b.Put(t.Context(), "prod-a/"+backup.ManifestKey(m.DataKey), strings.NewReader("{}"), nil))
				}}
			}},
	} {
		for _, pair := range []bool{false, true} {
			if pair && tc.stageOnly {
				continue
			}
			t.Run(fmt.Sprintf("%s pair=%v", tc.name, pair), func(t *testing.T) {
				b, dir := newFile(t)
				s := &stagingLog{Bucket: b, pair: pair}
				m := storeManifest("segment")
				tc.setup(t, b, s, m)
				committing, err := (&backup.BucketUploader{Bucket: s}).Store(t.Context(), m, strings.NewReader("segment"))
				require.ErrorIs(t, err, tc.is)
				assert.Equal(t, tc.committing, committing)
				var want []string
				for _, k := range tc.left {
					key := "prod-a/" + m.DataKey
					if k == "manifest" {
						key = "prod-a/" + backup.ManifestKey(m.DataKey)
					}
					want = append(want, key, key+".attrs")
				}
				assert.ElementsMatch(t, want, filesIn(t, dir), "files left")
				if slices.Contains(tc.left, "data") {
					assert.Equal(t, "theirs", string(readObject(t, b, "prod-a/"+m.DataKey)), "another run's data object")
				}
			})
		}
	}
}

// TestStoreUnsupportedWritesNothing: a bucket that cannot stage (mem://, a
// file bucket with exclusive puts turned off) fails Store with
// storage.ErrUnsupported, not committing, and writes nothing.
func TestStoreUnsupportedWritesNothing(t *testing.T) {
	mem, err := blob.Open(t.Context(), drivers.NewURLMux(nil), "mem://", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = mem.Close() })
	dir := t.TempDir()
	noExcl, err := blob.Open(t.Context(), drivers.NewURLMux(nil), "file://"+dir, &blob.Options{NoExclusivePut: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = noExcl.Close() })
	for name, b := range map[string]storage.Bucket{"mem": mem, "no exclusive puts": noExcl} {
		committing, err := (&backup.BucketUploader{Bucket: b}).Store(t.Context(), storeManifest("x"), strings.NewReader("x"))
		require.True(t, errors.Is(err, storage.ErrUnsupported), "%s: %v", name, err)
		assert.False(t, committing, name)
		assert.Empty(t, listKeys(t, b), name)
	}
	assert.Empty(t, filesIn(t, dir))
}

// TestStoreNamesManifestAfterDataDespiteCancel: a context that ends once
// the data object is named does not stop the manifest, staged already,
// from being named: the backup is committed, not left in doubt with its
// data object kept.
func TestStoreNamesManifestAfterDataDespiteCancel(t *testing.T) {
	for _, pair := range []bool{false, true} {
		b, _ := newFile(t)
		ctx, cancel := context.WithCancel(t.Context())
		s := &stagingLog{Bucket: b, pair: pair, before: map[string]func(context.Context){"manifest": func(context.Context) { cancel() }}}
		m := storeManifest("segment")
		committing, err := (&backup.BucketUploader{Bucket: s}).Store(ctx, m, strings.NewReader("segment"))
		cancel()
		require.NoError(t, err, "pair %v", pair)
		assert.True(t, committing)
		assert.Equal(t, 1, requireWholeBackups(t, b))
	}
}

// TestStoreStopsAtALostLock: a publish bound that ends once the data
// object is named (a follower's lost lock) stops the manifest from being
// named, although the store goes on past the end of its own context.
func TestStoreStopsAtALostLock(t *testing.T) {
	for _, pair := range []bool{false, true} {
		b, _ := newFile(t)
		bctx, end := cleanup.PublishBound(t.Context())
		wctx, cancel := cleanup.Publish(bctx, time.Hour)
		s := &stagingLog{Bucket: b, pair: pair, before: map[string]func(context.Context){"manifest": func(ctx context.Context) {
			end(errors.New("lock lost"))
			select { // the bound ends the publish's context asynchronously
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
		}}}
		m := storeManifest("segment")
		_, err := (&backup.BucketUploader{Bucket: s}).Store(wctx, m, strings.NewReader("segment"))
		cancel()
		end(nil)
		require.Error(t, err, "pair %v", pair)
		_, err = b.Stat(t.Context(), "prod-a/"+backup.ManifestKey(m.DataKey))
		require.ErrorIs(t, err, storage.ErrNotFound, "pair %v: the manifest was named after the lock was lost", pair)
	}
}

// readingRefuser is a PairStager that reads the data body, then answers
// ErrUnsupported, breaking PairStager's contract.
type readingRefuser struct{ *blob.Bucket }

func (b readingRefuser) PutThenStage(_ context.Context, first, _ storage.StagePut) (storage.Staged, error) {
	_, _ = io.Copy(io.Discard, first.Body)
	return nil, storage.Errorf("put", first.Key, storage.ErrUnsupported, nil)
}

// TestStorePairRefusalAfterReading: a PairStager that read a body before
// refusing with ErrUnsupported fails the store, not with ErrUnsupported:
// neither the Stager path nor the caller's Upload goes on with what is
// left of the body (an empty data object under a manifest that says
// otherwise).
func TestStorePairRefusalAfterReading(t *testing.T) {
	b, dir := newFile(t)
	_, err := (&backup.BucketUploader{Bucket: readingRefuser{b}}).Store(t.Context(), storeManifest("segment"), strings.NewReader("segment"))
	require.Error(t, err)
	require.False(t, errors.Is(err, storage.ErrUnsupported), "the caller would upload what is left of the body: %v", err)
	assert.Empty(t, filesIn(t, dir))
}
