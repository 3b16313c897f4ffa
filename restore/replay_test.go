package restore

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/storage/datadir"
	"go.uber.org/zap"

	"github.com/etcdbackup/etcdbackup/backup"
)

// restoredDir restores the test snapshot (revision 4) into a data
// directory.
func restoredDir(t *testing.T) string {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "three-keys.db.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "snap.db")
	if err := os.WriteFile(snap, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "data")
	if _, err := (&Restorer{}).RestoreFile(context.Background(), snap, Member{Name: "m", DataDir: dir, PeerURLs: []string{"http://127.0.0.1:2380"}}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func put(rev int64, key string) *backup.SegmentRevision {
	return &backup.SegmentRevision{Revision: rev, Received: time.Unix(rev, 0), Events: []backup.SegmentEvent{
		{Key: []byte(key), Value: []byte("v"), ModRevision: rev, CreateRevision: rev, Version: 1}}}
}

// TestReplayRules applies revisions to a restored database: the next
// revision applies, one already held is skipped, a gap, a delete of a key
// the database does not hold and a revision past the target stop replay,
// a put whose create revision and version differ from the source's is
// refused, and the database keeps the last revision applied.
func TestReplayRules(t *testing.T) {
	dir := restoredDir(t)
	rp, err := openReplay(dir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if rp.start != 4 {
		t.Fatalf("restored database at revision %d, want 4", rp.start)
	}
	rp.target = 6
	if err := rp.apply(put(5, "new")); err != nil {
		t.Fatal(err)
	}
	if err := rp.apply(put(5, "again")); err != nil || rp.rev != 5 {
		t.Fatalf("a revision held already: %v, at %d", err, rp.rev)
	}
	if err := rp.apply(put(7, "gap")); !errors.Is(err, errReplayDone) {
		t.Fatalf("past the target: %v", err)
	}
	rp.target = 0
	if err := rp.apply(put(7, "gap")); !errors.Is(err, ErrReplay) {
		t.Fatalf("a gap: %v", err)
	}
	del := &backup.SegmentRevision{Revision: 6, Events: []backup.SegmentEvent{{Delete: true, Key: []byte("missing"), ModRevision: 6}}}
	if err := rp.apply(del); !errors.Is(err, ErrReplay) {
		t.Fatalf("a delete of a missing key: %v", err)
	}
	// "new" was created at 5 here; a source whose "new" was created at 3
	// and is at version 2 is another history.
	other := &backup.SegmentRevision{Revision: 6, Events: []backup.SegmentEvent{
		{Key: []byte("new"), Value: []byte("w"), ModRevision: 6, CreateRevision: 3, Version: 2}}}
	if err := rp.apply(other); !errors.Is(err, ErrReplay) || rp.rev != 5 {
		t.Fatalf("a put of another history: %v, at %d", err, rp.rev)
	}
	lease := &backup.SegmentRevision{Revision: 6, Leases: []backup.SegmentLease{{ID: 77, TTL: 30}}, Events: []backup.SegmentEvent{
		{Key: []byte("leased"), Value: []byte("v"), ModRevision: 6, CreateRevision: 6, Version: 1, Lease: 77}}}
	if err := rp.apply(lease); err != nil {
		t.Fatal(err)
	}
	if l := rp.le.Lookup(77); l == nil || l.TTL() != 30 {
		t.Fatalf("lease 77: %v", l)
	}
	if err := rp.close(0); err != nil {
		t.Fatal(err)
	}
	st, err := Status(datadir.ToBackendFileName(dir))
	if err != nil {
		t.Fatal(err)
	}
	if st.Revision != 6 || st.TotalKeys != 5 {
		t.Fatalf("status %+v, want revision 6 and 5 keys", st)
	}
}

// replayPeakHeap replays n revisions of 1 KiB puts over 1,000 keys onto the
// test database and returns the peak live heap sampled every 5,000
// revisions, after a collection.
func replayPeakHeap(t *testing.T, n int64) uint64 {
	t.Helper()
	rp, err := openReplay(restoredDir(t), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer rp.close(0)
	value := bytes.Repeat([]byte("v"), 1024)
	var peak uint64
	versions := map[int]int64{}
	created := map[int]int64{}
	for i := range n {
		rev := rp.rev + 1
		k := int(i % 1000)
		if versions[k] == 0 {
			created[k] = rev
		}
		versions[k]++
		r := &backup.SegmentRevision{Revision: rev, Events: []backup.SegmentEvent{{Key: fmt.Appendf(nil, "/k/%04d", k), Value: value,
			ModRevision: rev, CreateRevision: created[k], Version: versions[k]}}}
		if err := rp.apply(r); err != nil {
			t.Fatal(err)
		}
		if i%5000 == 4999 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
		}
	}
	return peak
}

// TestReplayMemoryFlat: replay commits every replayBatch writes, so its
// live heap does not grow with the replay's length: 200k revisions of
// 1 KiB hold about what 20k do (etcd's in-memory key index adds its 16
// bytes or so per revision, which replay cannot drop).
func TestReplayMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 220k revisions")
	}
	base := replayPeakHeap(t, 20_000)
	long := replayPeakHeap(t, 200_000)
	t.Logf("peak live heap: 20k revisions %.1f MiB, 200k revisions %.1f MiB", float64(base)/(1<<20), float64(long)/(1<<20))
	// The key index: 180k more revisions of 16 B, and slice growth.
	allowance := uint64(180_000 * 16 * 2)
	if long > base+base/10+allowance {
		t.Fatalf("replay memory grows with its length: %d bytes for 20k revisions, %d for 200k", base, long)
	}
}
