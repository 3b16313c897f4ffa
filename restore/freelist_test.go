package restore

import (
	"context"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// patchFreelist rewrites the free list page of both metas of the bbolt
// file at path to list the given page ids as free.
func patchFreelist(t *testing.T, path string, ids func(freelist uint64) []uint64) {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	ps := int(binary.LittleEndian.Uint32(b[16+8:]))
	for m := range 2 {
		off := m*ps + 16
		fl := binary.LittleEndian.Uint64(b[off+32:])
		p := b[int(fl)*ps:]
		list := ids(fl)
		binary.LittleEndian.PutUint16(p[10:], uint16(len(list)))
		for i, id := range list {
			binary.LittleEndian.PutUint64(p[16+8*i:], id)
		}
	}
	require.NoError(t, os.WriteFile(path, b, 0o600))
}

// freelistCases are free lists etcd's backend panics on when it commits,
// with its lock held.
var freelistCases = map[string]func(freelist uint64) []uint64{
	"page past the end":    func(uint64) []uint64 { return []uint64{1000000} },
	"the free list itself": func(fl uint64) []uint64 { return []uint64{fl} },
	"pages in use":         func(uint64) []uint64 { return []uint64{2, 3, 4, 5} },
	"out of order":         func(uint64) []uint64 { return []uint64{5, 3} },
	"a meta page":          func(uint64) []uint64 { return []uint64{1} },
}

// freelistDatabase writes a valid etcd database whose free list is then
// replaced by ids.
func freelistDatabase(t *testing.T, ids func(uint64) []uint64) string {
	path := filepath.Join(t.TempDir(), "db")
	writeDatabase(t, path, []boltEntry{{"key", revisionKey(2, 0), keyValue(t, "/a", 2)}, {"key", revisionKey(3, 0), keyValue(t, "/b", 3)}})
	patchFreelist(t, path, ids)
	return path
}

// bounded runs f and fails the test if it does not return within 30 s,
// so that a hang fails rather than blocks the suite.
func bounded(t *testing.T, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("hangs")
		return nil
	}
}

func TestSnapshotKeysRefusesABrokenFreeListWithoutHanging(t *testing.T) {
	for name, ids := range freelistCases {
		t.Run(name, func(t *testing.T) {
			b := fileBackup(t, snapshotOf(t, freelistDatabase(t, ids)))
			r := &Restorer{TempDir: t.TempDir()}
			err := bounded(t, func(ctx context.Context) error {
				_, _, err := r.SnapshotKeys(ctx, b, nil, io.Discard)
				return err
			})
			require.ErrorIs(t, err, ErrIntegrity)
		})
	}
}

func TestRestoreFileRefusesABrokenFreeListWithoutHanging(t *testing.T) {
	for name, ids := range freelistCases {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "snapshot.db")
			require.NoError(t, os.WriteFile(file, snapshotOf(t, freelistDatabase(t, ids)), 0o600))
			r := &Restorer{TempDir: t.TempDir()}
			err := bounded(t, func(ctx context.Context) error {
				_, err := r.RestoreFile(ctx, file, Member{Name: "m", DataDir: filepath.Join(t.TempDir(), "member"), PeerURLs: []string{"http://127.0.0.1:2380"}})
				return err
			})
			require.ErrorIs(t, err, ErrIntegrity)
		})
	}
}

func TestCheckDatabaseAcceptsAValidFreeList(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	writeDatabase(t, path, []boltEntry{{"key", revisionKey(2, 0), keyValue(t, "/a", 2)}})
	require.NoError(t, checkDatabase(t.Context(), path))
}
