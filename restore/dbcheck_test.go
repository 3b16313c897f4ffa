package restore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
)

var testTime = time.Date(2026, 11, 24, 19, 0, 0, 0, time.UTC)

func newMemBucket(t *testing.T) *blob.Bucket {
	t.Helper()
	b, err := blob.Open(t.Context(), drivers.NewURLMux(nil), "mem://", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// boltEntry is one key and value of a bucket of a database written for a
// test.
type boltEntry struct {
	bucket     string
	key, value []byte
}

// writeDatabase writes a bbolt database of entries at path, with etcd's
// "key" and "meta" buckets created whether or not they hold anything.
func writeDatabase(t testing.TB, path string, entries []boltEntry) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		for _, name := range []string{"key", "meta"} {
			if _, err := tx.CreateBucketIfNotExists([]byte(name)); err != nil {
				return err
			}
		}
		for _, e := range entries {
			b, err := tx.CreateBucketIfNotExists([]byte(e.bucket))
			if err != nil {
				return err
			}
			if err := b.Put(e.key, e.value); err != nil {
				return err
			}
		}
		return nil
	}))
}

func revisionKey(main, sub int64) []byte {
	k := make([]byte, revisionKeyLen)
	binary.BigEndian.PutUint64(k, uint64(main))
	k[8] = '_'
	binary.BigEndian.PutUint64(k[9:], uint64(sub))
	return k
}

func keyValue(t testing.TB, key string, rev int64) []byte {
	t.Helper()
	v, err := proto.Marshal(&mvccpb.KeyValue{Key: []byte(key), CreateRevision: rev, ModRevision: rev, Version: 1, Value: []byte("v")})
	require.NoError(t, err)
	return v
}

// snapshotOf returns the database at path as etcd streams a snapshot: the
// file and its sha256.
func snapshotOf(t testing.TB, path string) []byte {
	t.Helper()
	db, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha256.Sum256(db)
	return append(db, sum[:]...)
}

// fileBackup is a snapshot backup in a mem bucket, for SnapshotKeys.
func fileBackup(t *testing.T, stream []byte) Backup {
	t.Helper()
	b := newMemBucket(t)
	p := &backup.Pipeline{Snapshotter: rawSnapshotter(stream)}
	_, err := p.Run(t.Context(), backup.Request{Cluster: "c", Name: "n", Targets: []backup.Target{{Destination: "d", Uploader: &backup.BucketUploader{Bucket: b}}}})
	require.NoError(t, err)
	found, err := Find(t.Context(), []Source{{Name: "d", Catalog: b}}, Query{Cluster: "c"})
	require.NoError(t, err)
	return found
}

type rawSnapshotter []byte

func (s rawSnapshotter) Snapshot(context.Context) (*backup.Snapshot, error) {
	return backup.NewSnapshot(io.NopCloser(bytes.NewReader(s)), backup.SnapshotInfo{RevisionLow: 1, RevisionHigh: 1}, nil), nil
}

// TestSnapshotKeysNotADatabase: a snapshot whose trailer matches but whose
// database etcd's storage cannot read fails SnapshotKeys and RestoreFile
// with ErrIntegrity. Before the check, each of these took the process
// down: a panic, one on a goroutine of etcd's, or zap's Fatal (os.Exit).
func TestSnapshotKeysNotADatabase(t *testing.T) {
	good := []boltEntry{{"key", revisionKey(2, 0), keyValue(t, "/a", 2)}, {"key", revisionKey(3, 0), keyValue(t, "/b", 3)}}
	for name, entries := range map[string][]boltEntry{
		"11-byte revision":   append(good, boltEntry{"key", []byte("01234567890"), keyValue(t, "/c", 4)}),
		"value no KeyValue":  append(good, boltEntry{"key", revisionKey(4, 0), []byte{0xff, 0xff, 0xff}}),
		"revision twice":     append(good, boltEntry{"key", append(revisionKey(3, 0), 't'), keyValue(t, "/b", 3)}),
		"bad compact":        append(good, boltEntry{"meta", []byte("finishedCompactRev"), []byte("x")}),
		"bad consistent idx": append(good, boltEntry{"meta", []byte("consistent_index"), []byte("x")}),
		"lease no lease":     append(good, boltEntry{"lease", []byte("12345678"), []byte{0xff, 0xff}}),
		"negative revision":  append(good, boltEntry{"key", revisionKey(-5, 0), keyValue(t, "/d", 5)}),
		"not a bbolt at all": nil,
	} {
		t.Run(name, func(t *testing.T) {
			var stream []byte
			if entries == nil {
				stream = backupStream(bytes.Repeat([]byte("not a database. "), 4096))
			} else {
				path := filepath.Join(t.TempDir(), "db")
				writeDatabase(t, path, entries)
				stream = snapshotOf(t, path)
			}
			r := &Restorer{TempDir: t.TempDir()}
			_, _, err := r.SnapshotKeys(t.Context(), fileBackup(t, stream), nil, io.Discard)
			require.ErrorIs(t, err, ErrIntegrity)

			file := filepath.Join(t.TempDir(), "snapshot.db")
			require.NoError(t, os.WriteFile(file, stream, 0o600))
			dataDir := filepath.Join(t.TempDir(), "member")
			_, err = r.RestoreFile(t.Context(), file, Member{Name: "m", DataDir: dataDir, PeerURLs: []string{"http://127.0.0.1:2380"}})
			require.ErrorIs(t, err, ErrIntegrity)
			_, err = os.Stat(dataDir)
			require.True(t, errors.Is(err, os.ErrNotExist))
		})
	}

	t.Run("a good one", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "db")
		writeDatabase(t, path, good)
		var out bytes.Buffer
		h, n, err := (&Restorer{TempDir: t.TempDir()}).SnapshotKeys(t.Context(), fileBackup(t, snapshotOf(t, path)), nil, &out)
		require.NoError(t, err)
		require.EqualValues(t, 2, n)
		require.EqualValues(t, 3, h.Revision)
	})
}

// backupStream appends the sha256 trailer to body, as etcd streams it.
func backupStream(body []byte) []byte {
	sum := sha256.Sum256(body)
	return append(bytes.Clone(body), sum[:]...)
}

// FuzzSnapshotKeys: no database, whatever its keys and values, makes
// SnapshotKeys' reading panic or exit: checkDatabase refuses what etcd's
// storage cannot read. The input is entries of etcd's "key", "meta" and
// "lease" buckets, each as a bucket byte, two lengths and the bytes.
func FuzzSnapshotKeys(f *testing.F) {
	f.Add(encodeEntries(boltEntry{"key", revisionKey(2, 0), keyValue(f, "/a", 2)}))
	f.Add(encodeEntries(boltEntry{"key", []byte("01234567890"), keyValue(f, "/a", 2)}))
	f.Add(encodeEntries(boltEntry{"key", revisionKey(2, 0), []byte{0xff}}, boltEntry{"meta", []byte("finishedCompactRev"), revisionKey(9, 0)}))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries := decodeEntries(data)
		path := filepath.Join(t.TempDir(), "db")
		writeDatabase(t, path, entries)
		if err := checkDatabase(context.Background(), path); err != nil {
			require.ErrorIs(t, err, ErrIntegrity)
			return
		}
		kv, closeStore, err := openStore(path)
		if err != nil {
			require.ErrorIs(t, err, ErrIntegrity)
			return
		}
		defer closeStore()
		h := backup.KeysJSONHeader{Format: backup.KeysJSONFormat, Version: backup.KeysJSONVersion, Revision: kv.Rev(), Created: testTime}
		if h.Revision < 1 {
			return
		}
		kw, err := backup.NewKeysJSONWriter(io.Discard, h)
		require.NoError(t, err)
		_ = writeStoreKeys(context.Background(), kv, h, kw)
	})
}

var bucketNames = []string{"key", "meta", "lease"}

func encodeEntries(entries ...boltEntry) []byte {
	var out []byte
	for _, e := range entries {
		i := 0
		for j, n := range bucketNames {
			if n == e.bucket {
				i = j
			}
		}
		out = append(out, byte(i), byte(len(e.key)), byte(len(e.value)))
		out = append(out, e.key...)
		out = append(out, e.value...)
	}
	return out
}

func decodeEntries(data []byte) []boltEntry {
	var out []boltEntry
	for len(data) >= 3 {
		b, kl, vl := int(data[0])%len(bucketNames), int(data[1]), int(data[2])
		data = data[3:]
		if kl == 0 || kl+vl > len(data) {
			break
		}
		out = append(out, boltEntry{bucketNames[b], data[:kl], data[kl : kl+vl]})
		data = data[kl+vl:]
	}
	return out
}
