package restore_test

import (
	"context"
	"errors"
	"io"
	"iter"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
)

var (
	t1 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	t2 = time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC)
	t3 = time.Date(2025, 1, 3, 0, 0, 0, 0, time.UTC)
)

// backupAt runs one backup at the given time to every bucket.
func backupAt(t *testing.T, at time.Time, cluster, name string, buckets ...storage.Bucket) *backup.Manifest {
	t.Helper()
	p := &backup.Pipeline{Snapshotter: streamSnapshotter{fakeSnapshot(8, uint64(at.Unix()))}, Now: func() time.Time { return at }}
	var targets []backup.Target
	for i, b := range buckets {
		targets = append(targets, backup.Target{Destination: []string{"a", "b", "c"}[i], Uploader: &backup.BucketUploader{Bucket: b}})
	}
	res, err := p.Run(t.Context(), backup.Request{Cluster: cluster, Name: name, Targets: targets})
	require.NoError(t, err)
	return res.Outcomes[0].Manifest
}

func fileBucket(t *testing.T) (*blob.Bucket, string) {
	t.Helper()
	dir := t.TempDir()
	b, err := blob.Open(t.Context(), drivers.NewURLMux(nil), "file://"+dir+"?metadata=skip", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b, dir
}

// failingCatalog fails every call.
type failingCatalog struct{ err error }

func (f failingCatalog) List(context.Context, string) iter.Seq2[storage.ObjectInfo, error] {
	return func(yield func(storage.ObjectInfo, error) bool) { yield(storage.ObjectInfo{}, f.err) }
}

func (f failingCatalog) Get(context.Context, string) (io.ReadCloser, error) { return nil, f.err }

func TestFind(t *testing.T) {
	a, aDir := fileBucket(t)
	b := memBucket(t)
	n1 := backupAt(t, t1, "prod-a", "n1", a)
	n2 := backupAt(t, t2, "prod-a", "n2", b)
	n3 := backupAt(t, t3, "prod-a", "n3", a, b)
	other := backupAt(t, t3.Add(time.Hour), "prod-ab", "newer", a)

	put(t, a, "prod-a/old-job.db.gz", []byte("legacy"))
	old := time.Date(2020, 6, 1, 0, 0, 0, 0, time.UTC)
	require.NoError(t, os.Chtimes(filepath.Join(aDir, "prod-a", "old-job.db.gz"), old, old))
	ghost := "20250104T000000Z_prod-a-ghost.db.zst"
	put(t, a, "prod-a/"+ghost, []byte("orphan"))
	put(t, b, "prod-a/20250105T000000Z_prod-a-bad.manifest.json", []byte("{not json"))
	put(t, a, "prod-a/sub/notes.txt", []byte("foreign"))

	ab := []restore.Source{{Name: "a", Catalog: a}, {Name: "b", Catalog: b}}
	ba := []restore.Source{{Name: "b", Catalog: b}, {Name: "a", Catalog: a}}
	down := restore.Source{Name: "down", Catalog: failingCatalog{errors.New("connection refused")}}

	tests := []struct {
		name       string
		sources    []restore.Source
		q          restore.Query
		wantID     string
		wantSource string
		wantKind   backup.Kind
		wantErr    error
		wantDown   bool // the error is the failure of source "down"
	}{
		{name: "latest, first source wins a tie", sources: ab, q: restore.Query{Cluster: "prod-a"}, wantID: n3.ID, wantSource: "a"},
		{name: "latest, sources reversed", sources: ba, q: restore.Query{Cluster: "prod-a"}, wantID: n3.ID, wantSource: "b"},
		{name: "latest on one source", sources: ab[1:], q: restore.Query{Cluster: "prod-a"}, wantID: n3.ID, wantSource: "b"},
		{name: "by backup id", sources: ab, q: restore.Query{Cluster: "prod-a", ID: n2.ID}, wantID: n2.ID, wantSource: "b"},
		{name: "by data file name", sources: ab, q: restore.Query{Cluster: "prod-a", ID: n1.DataKey}, wantID: n1.ID, wantSource: "a"},
		{name: "by data key", sources: ab, q: restore.Query{Cluster: "prod-a", ID: "prod-a/" + n1.DataKey}, wantID: n1.ID, wantSource: "a"},
		{name: "by manifest key", sources: ab, q: restore.Query{Cluster: "prod-a", ID: "prod-a/" + backup.ManifestKey(n1.DataKey)}, wantID: n1.ID},
		{name: "legacy by file name", sources: ab, q: restore.Query{Cluster: "prod-a", ID: "old-job.db.gz"}, wantID: "old-job.db.gz", wantKind: backup.KindLegacy},
		{name: "before t3", sources: ab, q: restore.Query{Cluster: "prod-a", Before: t3}, wantID: n2.ID},
		{name: "before t2", sources: ab, q: restore.Query{Cluster: "prod-a", Before: t2}, wantID: n1.ID},
		{name: "before t1 is the legacy object", sources: ab, q: restore.Query{Cluster: "prod-a", Before: t1}, wantID: "old-job.db.gz", wantKind: backup.KindLegacy},
		{name: "id and before", sources: ab, q: restore.Query{Cluster: "prod-a", ID: n3.ID, Before: t3}, wantErr: restore.ErrNoBackup},
		{name: "nothing before 2019", sources: ab, q: restore.Query{Cluster: "prod-a", Before: time.Date(2019, 1, 1, 0, 0, 0, 0, time.UTC)}, wantErr: restore.ErrNoBackup},
		{name: "unknown id", sources: ab, q: restore.Query{Cluster: "prod-a", ID: "prod-a-nope"}, wantErr: restore.ErrNoBackup},
		{name: "orphan by name", sources: ab, q: restore.Query{Cluster: "prod-a", ID: ghost}, wantErr: restore.ErrNotRestorable},
		{name: "invalid manifest by name", sources: ab, q: restore.Query{Cluster: "prod-a", ID: "20250105T000000Z_prod-a-bad.manifest.json"}, wantErr: restore.ErrNotRestorable},
		{name: "cluster prefix does not leak", sources: ab, q: restore.Query{Cluster: "prod-ab"}, wantID: other.ID},
		{name: "unknown cluster", sources: ab, q: restore.Query{Cluster: "prod-c"}, wantErr: restore.ErrNoBackup},
		{name: "invalid cluster name", sources: ab, q: restore.Query{Cluster: "Prod/A"}, wantErr: backup.ErrInvalidName},
		{name: "a source down fails", sources: append([]restore.Source{down}, ab...), q: restore.Query{Cluster: "prod-a"}, wantDown: true},
		{name: "a source down tolerated", sources: append([]restore.Source{down}, ab...), q: restore.Query{Cluster: "prod-a", TolerateUnavailable: true}, wantID: n3.ID, wantSource: "a"},
		{name: "every source down", sources: []restore.Source{down}, q: restore.Query{Cluster: "prod-a", TolerateUnavailable: true}, wantDown: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := restore.Find(t.Context(), tc.sources, tc.q)
			if tc.wantDown {
				var se *restore.SourceError
				require.ErrorAs(t, err, &se)
				require.Equal(t, "down", se.Source)
				return
			}
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantID, got.ID)
			if tc.wantSource != "" {
				require.Equal(t, tc.wantSource, got.Source)
			}
			kind := tc.wantKind
			if kind == "" {
				kind = backup.KindBackup
			}
			require.Equal(t, kind, got.Kind)
			require.NotNil(t, got.Catalog)
		})
	}
}

func TestList(t *testing.T) {
	a, b := memBucket(t), memBucket(t)
	backupAt(t, t2, "prod-a", "n2", a, b)
	backupAt(t, t1, "prod-a", "n1", b)
	put(t, a, "prod-a/20250104T000000Z_prod-a-ghost.db", []byte("orphan"))

	all, err := restore.List(t.Context(), []restore.Source{{Name: "a", Catalog: a}, {Name: "b", Catalog: b}}, "prod-a")
	require.NoError(t, err)
	type row struct {
		source string
		kind   backup.Kind
		id     string
	}
	var got []row
	for _, e := range all {
		got = append(got, row{e.Source, e.Kind, e.ID})
	}
	require.Equal(t, []row{
		{"b", backup.KindBackup, "prod-a-n1"},
		{"a", backup.KindBackup, "prod-a-n2"},
		{"b", backup.KindBackup, "prod-a-n2"},
		{"a", backup.KindOrphan, "20250104T000000Z_prod-a-ghost.db"},
	}, got)

	all, err = restore.List(t.Context(), []restore.Source{{Name: "a", Catalog: a}, {Name: "x", Catalog: failingCatalog{errors.New("boom")}}}, "prod-a")
	var se *restore.SourceError
	require.ErrorAs(t, err, &se)
	require.Equal(t, "x", se.Source)
	require.Len(t, all, 2, "what the working source holds")
}
