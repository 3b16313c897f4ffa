package restore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"iter"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage"
)

// encoding is one way a backup is stored.
type encoding struct {
	name        string
	compression backup.Compression
	identity    age.Identity // nil: not encrypted
	recipient   string
}

func encodings(t *testing.T) []encoding {
	t.Helper()
	x, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	pq, err := age.GenerateHybridIdentity()
	require.NoError(t, err)
	return []encoding{
		{name: "zstd", compression: backup.Zstd},
		{name: "gzip", compression: backup.Gzip},
		{name: "none", compression: backup.None},
		{name: "zstd+age", compression: backup.Zstd, identity: x, recipient: x.Recipient().String()},
		{name: "none+age", compression: backup.None, identity: x, recipient: x.Recipient().String()},
		{name: "gzip+age-pq", compression: backup.Gzip, identity: pq, recipient: pq.Recipient().String()},
	}
}

// storedBackup backs stream up to a new mem bucket and finds it.
func storedBackup(t *testing.T, stream []byte, enc encoding) (restore.Backup, storage.Bucket) {
	t.Helper()
	b := memBucket(t)
	var recipients []string
	if enc.recipient != "" {
		recipients = []string{enc.recipient}
	}
	runBackup(t, streamSnapshotter{stream}, b, "prod-a", "n", enc.compression, recipients...)
	found, err := restore.Find(t.Context(), []restore.Source{{Name: "mem", Catalog: b}}, restore.Query{Cluster: "prod-a"})
	require.NoError(t, err)
	return found, b
}

func (e encoding) restorer() *restore.Restorer {
	r := &restore.Restorer{}
	if e.identity != nil {
		r.Identities = []age.Identity{e.identity}
	}
	return r
}

func TestFetch(t *testing.T) {
	stream := fakeSnapshot(3000, 1) // 1.5 MiB: more than one read-ahead buffer
	for _, enc := range encodings(t) {
		t.Run(enc.name, func(t *testing.T) {
			found, _ := storedBackup(t, stream, enc)
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			rec := &recorder{}
			r := enc.restorer()
			r.Observer, r.Now, r.ProgressInterval = rec, stepClock(time.Second), time.Second
			target := filepath.Join(t.TempDir(), "snapshot.db")

			res, err := r.Fetch(t.Context(), found, target)
			require.NoError(t, err)
			got, err := os.ReadFile(target)
			require.NoError(t, err)
			require.True(t, bytes.Equal(stream, got), "the snapshot, trailer included")
			require.Equal(t, found.Manifest.Raw, res.Raw)
			require.Equal(t, found.Manifest.Stored, res.Stored)
			require.True(t, res.ManifestChecked)
			require.Equal(t, enc.compression, res.Compression)
			require.Equal(t, enc.identity != nil, res.Encrypted)
			require.Equal(t, target, res.Path)
			require.Equal(t, []string{"snapshot.db"}, dirEntries(t, filepath.Dir(target)), "no part file left")

			require.Equal(t, []restore.EventKind{restore.Started, restore.Progress, restore.Fetched}, rec.kinds())
			last := rec.events[len(rec.events)-1]
			require.Equal(t, res.Stored.Size, last.StoredBytes)
			require.Equal(t, res.Stored.Size, last.StoredSize)
			require.Equal(t, res.Raw.Size, last.RawBytes)
			require.Positive(t, last.Rate)
			for _, e := range rec.events {
				require.Equal(t, "mem", e.Source)
				require.Equal(t, found.ID, e.ID)
			}
		})
	}
}

func TestFetchDamaged(t *testing.T) {
	stream := fakeSnapshot(3000, 2)
	for _, enc := range encodings(t) {
		t.Run(enc.name, func(t *testing.T) {
			found, b := storedBackup(t, stream, enc)
			good := readAll(t, b, found.Key)
			damages := map[string][]byte{
				"flip near the start": flipAt(good, 30),
				"flip in the middle":  flipAt(good, len(good)/2),
				"flip the last byte":  flipAt(good, len(good)-1),
				"cut the last byte":   good[:len(good)-1],
				"cut in half":         good[:len(good)/2],
				"cut to 3 bytes":      good[:3],
				"empty":               {},
				"one byte more":       append(bytes.Clone(good), 0),
			}
			for name, stored := range damages {
				t.Run(name, func(t *testing.T) {
					defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
					put(t, b, found.Key, stored)
					target := filepath.Join(t.TempDir(), "snapshot.db")
					_, err := enc.restorer().Fetch(t.Context(), found, target)
					require.ErrorIs(t, err, restore.ErrIntegrity)
					require.NotErrorIs(t, err, restore.ErrDecrypt)
					requireNothingAt(t, target)
				})
			}
		})
	}
}

func flipAt(b []byte, i int) []byte {
	b = bytes.Clone(b)
	b[i] ^= 0x01
	return b
}

func TestFetchTrailerErrorMatchesBoth(t *testing.T) {
	stream := fakeSnapshot(100, 3)
	stream[len(stream)-1] ^= 0x01 // the trailer itself is wrong
	b := memBucket(t)
	put(t, b, "prod-a/etcd.db", stream)
	found, err := restore.Find(t.Context(), []restore.Source{{Name: "mem", Catalog: b}}, restore.Query{Cluster: "prod-a"})
	require.NoError(t, err)
	target := filepath.Join(t.TempDir(), "snapshot.db")
	_, err = (&restore.Restorer{}).Fetch(t.Context(), found, target)
	require.ErrorIs(t, err, restore.ErrIntegrity)
	require.ErrorIs(t, err, backup.ErrSnapshotIntegrity)
	var ie *backup.IntegrityError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, backup.ProblemMismatch, ie.Problem)
	requireNothingAt(t, target)
}

func TestFetchDecrypt(t *testing.T) {
	owner, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	stranger, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	scrypt, err := age.NewScryptIdentity("not the key")
	require.NoError(t, err)
	found, _ := storedBackup(t, fakeSnapshot(100, 4), encoding{compression: backup.Zstd, recipient: owner.Recipient().String()})

	tests := []struct {
		name       string
		identities []age.Identity
		wantGets   int64
		wantErr    error
	}{
		{"no identity", nil, 0, restore.ErrDecrypt},
		{"a stranger's identity", []age.Identity{stranger}, 1, restore.ErrDecrypt},
		{"an identity whose recipient is unknown: age decides", []age.Identity{scrypt}, 1, restore.ErrDecrypt},
		{"the owner among others", []age.Identity{stranger, owner}, 1, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cat := &countingCatalog{Catalog: found.Catalog}
			b := found
			b.Catalog = cat
			target := filepath.Join(t.TempDir(), "snapshot.db")
			_, err := (&restore.Restorer{Identities: tc.identities}).Fetch(t.Context(), b, target)
			require.Equal(t, tc.wantGets, cat.gets.Load())
			if tc.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.wantErr)
			require.NotErrorIs(t, err, restore.ErrIntegrity)
			requireNothingAt(t, target)
		})
	}
}

// countingCatalog counts Gets.
type countingCatalog struct {
	backup.Catalog
	gets atomic.Int64
}

func (c *countingCatalog) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	c.gets.Add(1)
	return c.Catalog.Get(ctx, key)
}

// faultyCatalog serves objects whose reads fail with err after n bytes.
type faultyCatalog struct {
	backup.Catalog
	n   int64
	err error
}

func (c faultyCatalog) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := c.Catalog.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return &faultyReader{rc: rc, left: c.n, err: c.err}, nil
}

type faultyReader struct {
	rc   io.ReadCloser
	left int64
	err  error
}

func (f *faultyReader) Read(p []byte) (int, error) {
	if f.left <= 0 {
		return 0, f.err
	}
	if int64(len(p)) > f.left {
		p = p[:f.left]
	}
	n, err := f.rc.Read(p)
	f.left -= int64(n)
	return n, err
}

func (f *faultyReader) Close() error { return f.rc.Close() }

func (c faultyCatalog) List(ctx context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error] {
	return c.Catalog.List(ctx, prefix)
}

// TestFetchSourceFailure checks that a download that breaks off is
// reported as such, not as damaged data, for every encoding.
func TestFetchSourceFailure(t *testing.T) {
	stream := fakeSnapshot(3000, 5)
	errNetwork := errors.New("connection reset by peer")
	for _, enc := range encodings(t) {
		t.Run(enc.name, func(t *testing.T) {
			intact, _ := storedBackup(t, stream, enc)
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			for _, at := range []int64{0, 10, 300_000} {
				found := intact
				found.Catalog = faultyCatalog{Catalog: intact.Catalog, n: at, err: errNetwork}
				target := filepath.Join(t.TempDir(), "snapshot.db")
				_, err := enc.restorer().Fetch(t.Context(), found, target)
				require.ErrorIs(t, err, errNetwork, "after %d bytes", at)
				require.NotErrorIs(t, err, restore.ErrIntegrity, "after %d bytes", at)
				require.NotErrorIs(t, err, restore.ErrDecrypt, "after %d bytes", at)
				requireNothingAt(t, target)
			}
		})
	}
}

func TestFetchCancelled(t *testing.T) {
	enc := encodings(t)[0]
	found, _ := storedBackup(t, fakeSnapshot(8000, 6), enc)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r := enc.restorer()
	r.Now, r.ProgressInterval = stepClock(time.Second), time.Second
	r.Observer = restore.ObserverFunc(func(e restore.Event) {
		if e.Kind == restore.Progress {
			cancel()
		}
	})
	target := filepath.Join(t.TempDir(), "snapshot.db")
	_, err := r.Fetch(ctx, found, target)
	require.ErrorIs(t, err, context.Canceled)
	requireNothingAt(t, target)
}

func TestFetchRefusesExistingTarget(t *testing.T) {
	found, _ := storedBackup(t, fakeSnapshot(10, 7), encoding{compression: backup.Zstd})
	r := &restore.Restorer{}
	for _, existing := range []string{"snapshot.db", "snapshot.db.part"} {
		t.Run(existing, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, existing), []byte("keep me"), 0o600))
			_, err := r.Fetch(t.Context(), found, filepath.Join(dir, "snapshot.db"))
			require.ErrorIs(t, err, restore.ErrTargetExists)
			require.Equal(t, []string{existing}, dirEntries(t, dir))
			body, err := os.ReadFile(filepath.Join(dir, existing))
			require.NoError(t, err)
			require.Equal(t, "keep me", string(body))
		})
	}
}

func TestFetchNotRestorable(t *testing.T) {
	b := memBucket(t)
	put(t, b, "prod-a/20250104T000000Z_prod-a-ghost.db.zst", []byte("orphan"))
	all, err := restore.List(t.Context(), []restore.Source{{Name: "mem", Catalog: b}}, "prod-a")
	require.NoError(t, err)
	require.Len(t, all, 1)
	target := filepath.Join(t.TempDir(), "snapshot.db")
	_, err = (&restore.Restorer{}).Fetch(t.Context(), all[0], target)
	require.ErrorIs(t, err, restore.ErrNotRestorable)
	requireNothingAt(t, target)
}

// TestFetchLegacy stores snapshots the way other tools did, with no
// manifest, and with names that may or may not tell their encoding.
func TestFetchLegacy(t *testing.T) {
	stream := fakeSnapshot(1000, 8)
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	gz := encode(t, stream, func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) })
	zs := encode(t, stream, func(w io.Writer) io.WriteCloser {
		z, err := zstd.NewWriter(w)
		require.NoError(t, err)
		return z
	})
	agegz := encode(t, gz, func(w io.Writer) io.WriteCloser {
		a, err := age.Encrypt(w, id.Recipient())
		require.NoError(t, err)
		return a
	})
	tests := []struct {
		name        string
		body        []byte
		identities  []age.Identity
		compression backup.Compression
		encrypted   bool
		wantErr     error
	}{
		{name: "etcdctl.db", body: stream, compression: backup.None},
		{name: "old-job.db.gz", body: gz, compression: backup.Gzip},
		{name: "gzip-without-extension", body: gz, compression: backup.Gzip},
		{name: "misnamed.gz", body: stream, compression: backup.None},
		{name: "snapshot.zst", body: zs, compression: backup.Zstd},
		{name: "snapshot.gz.age", body: agegz, identities: []age.Identity{id}, compression: backup.Gzip, encrypted: true},
		{name: "encrypted-without-identity", body: agegz, wantErr: restore.ErrDecrypt},
		{name: "truncated.db", body: stream[:len(stream)-100], wantErr: backup.ErrSnapshotIntegrity},
		{name: "truncated.db.gz", body: gz[:len(gz)-20], wantErr: restore.ErrIntegrity},
		{name: "not-a-snapshot.txt", body: []byte("hello"), wantErr: restore.ErrIntegrity},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			b := memBucket(t)
			put(t, b, "prod-a/"+tc.name, tc.body)
			found, err := restore.Find(t.Context(), []restore.Source{{Name: "mem", Catalog: b}}, restore.Query{Cluster: "prod-a", ID: tc.name})
			require.NoError(t, err)
			require.Equal(t, backup.KindLegacy, found.Kind)
			target := filepath.Join(t.TempDir(), "snapshot.db")
			res, err := (&restore.Restorer{Identities: tc.identities}).Fetch(t.Context(), found, target)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				if tc.wantErr != restore.ErrDecrypt {
					require.ErrorIs(t, err, restore.ErrIntegrity)
				}
				requireNothingAt(t, target)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.compression, res.Compression)
			require.Equal(t, tc.encrypted, res.Encrypted)
			require.False(t, res.ManifestChecked)
			require.EqualValues(t, len(tc.body), res.Stored.Size)
			got, err := os.ReadFile(target)
			require.NoError(t, err)
			require.True(t, bytes.Equal(stream, got))
		})
	}
}

func encode(t *testing.T, body []byte, wrap func(io.Writer) io.WriteCloser) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := wrap(&buf)
	_, err := w.Write(body)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return buf.Bytes()
}

func TestRestorerValidate(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	tests := []struct {
		name    string
		r       restore.Restorer
		wantErr string
	}{
		{"zero value", restore.Restorer{}, ""},
		{"identities", restore.Restorer{Identities: []age.Identity{id}}, ""},
		{"nil identity", restore.Restorer{Identities: []age.Identity{id, nil}}, "identity 2 is nil"},
		{"negative interval", restore.Restorer{ProgressInterval: -time.Second}, "negative progress interval"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
			_, err = tc.r.Fetch(t.Context(), restore.Backup{}, filepath.Join(t.TempDir(), "x"))
			require.ErrorContains(t, err, tc.wantErr, "operations validate first")
		})
	}
}

func TestFetchFailureEvents(t *testing.T) {
	found, b := storedBackup(t, fakeSnapshot(100, 9), encoding{compression: backup.Zstd})
	put(t, b, found.Key, flipAt(readAll(t, b, found.Key), 50))
	rec := &recorder{}
	_, err := (&restore.Restorer{Observer: rec, Job: "ns/restore-a"}).Fetch(t.Context(), found, filepath.Join(t.TempDir(), "s.db"))
	require.ErrorIs(t, err, restore.ErrIntegrity)
	require.Equal(t, []restore.EventKind{restore.Started, restore.Failed}, without(rec.kinds(), restore.Progress))
	last := rec.events[len(rec.events)-1]
	require.ErrorIs(t, last.Err, restore.ErrIntegrity)
	require.Equal(t, found.ID, last.ID)
	for _, e := range rec.events {
		require.Equal(t, "ns/restore-a", e.Job, "every event names the host's job")
	}
}
