package replicate

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/storage"
)

// previousVersionsCopy returns the manifest a copy of f onto the target
// "dst" wrote by the versions whose copy token hashed the source's store
// time (copyTokens(m, true)), with its data object's bytes.
func previousVersionsCopy(t *testing.T, f *backup.Manifest) (*backup.Manifest, []byte) {
	t.Helper()
	want := *f
	want.Destination = "dst"
	want.SourceStored = f.Completed.UTC()
	tokens, err := copyTokens(&want, true)
	if err != nil {
		t.Fatal(err)
	}
	want.Run = tokens[0]
	return &want, []byte("full 0 " + strings.Repeat("x", 1000))
}

// TestCopyResumesAPreviousVersionsCopy: a copy by a version whose copy
// token hashed the source's store time was stopped between its data
// object and its manifest. After the upgrade the next copy of the same
// backup takes the data object for its own and resumes it (it was
// reported pending for ever), committing the manifest with the token the
// data object carries.
func TestCopyResumesAPreviousVersionsCopy(t *testing.T) {
	ctx := context.Background()
	store, dst := memBucket(), memBucket()
	f := full(t, store, 0, 10)
	src := &storeTimes{Bucket: store, times: map[string]time.Time{f.ID: f.Completed}}
	old, data := previousVersionsCopy(t, f)
	if err := (&backup.BucketUploader{Bucket: dst}).Upload(ctx, old, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"resumed", "skipped"} {
		rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true})
		if err != nil || outcomes(rep) != want {
			t.Fatalf("copy %d after the upgrade: %v, %q; want %s", i, err, outcomes(rep), want)
		}
	}
	e := listed(t, dst)
	if len(e) != 1 || e[0].Kind != backup.KindBackup || e[0].Manifest.Run != old.Run || !IsCopy(e[0].Manifest) {
		t.Fatalf("target lists %+v, want the backup committed with the previous version's token %s", e, old.Run)
	}
}

// memLocks is an in-memory target with object lock: it records the
// locks set on its objects.
type memLocks struct {
	storage.Bucket
	mu    sync.Mutex
	locks map[string]storage.Retention
}

func (m *memLocks) ObjectLock() destination.ObjectLock {
	return destination.ObjectLock{Mode: storage.Governance, RetainFor: time.Hour}
}

func (m *memLocks) Retention(ctx context.Context, key string) (storage.Retention, error) {
	if _, err := m.Bucket.Stat(ctx, key); err != nil {
		return storage.Retention{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.locks[key], nil
}

func (m *memLocks) SetRetention(_ context.Context, key string, r storage.Retention) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.locks[key] = r
	return nil
}

// TestCopyLocksAPreviousVersionsCommittedCopy: a copy by a version whose
// copy token hashed the source's store time committed its manifest onto
// a target with object lock and was stopped before locking. The next
// copy after the upgrade knows the backup for its own and locks it.
func TestCopyLocksAPreviousVersionsCommittedCopy(t *testing.T) {
	ctx := context.Background()
	store, mem := memBucket(), memBucket()
	f := full(t, store, 0, 10)
	src := &storeTimes{Bucket: store, times: map[string]time.Time{f.ID: f.Completed}}
	old, data := previousVersionsCopy(t, f)
	up := &backup.BucketUploader{Bucket: mem}
	if err := up.Upload(ctx, old, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := up.Commit(ctx, old); err != nil {
		t.Fatal(err)
	}
	dst := &memLocks{Bucket: mem, locks: map[string]storage.Retention{}}
	rep, err := copier(src, dst).Copy(ctx, "prod", Selection{All: true})
	if err != nil || outcomes(rep) != "skipped" {
		t.Fatalf("copy after the upgrade: %v, %q", err, outcomes(rep))
	}
	prefix := backup.ClusterPrefix(old.Cluster)
	for _, key := range []string{prefix + old.DataKey, prefix + backup.ManifestKey(old.DataKey)} {
		if r := dst.locks[key]; r.Mode != storage.Governance {
			t.Errorf("%s: lock %+v, want the target's governance lock", key, r)
		}
	}
}
