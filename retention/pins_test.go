package retention_test

import (
	"context"
	"strings"
	"sync"
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

func TestPinSet(t *testing.T) {
	var s retention.PinSet
	assert.False(t, s.Pinned("prod-a", "x"))
	first := s.Pin("prod-a", "x")
	second := s.Pin("prod-a", "x")
	assert.True(t, s.Pinned("prod-a", "x"))
	assert.False(t, s.Pinned("prod-b", "x"), "pins are per cluster")
	assert.False(t, s.Pinned("prod-a", "y"))
	first()
	first() // a second call releases nothing more
	assert.True(t, s.Pinned("prod-a", "x"), "held until every pin is released")
	second()
	assert.False(t, s.Pinned("prod-a", "x"))

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				unpin := s.Pin("prod-a", "z")
				_ = s.Pinned("prod-a", "z")
				unpin()
			}
		})
	}
	wg.Wait()
	assert.False(t, s.Pinned("prod-a", "z"))
}

// A pinned backup outlives a prune that would delete it, with its manifest,
// and goes at the first prune after its pin is released.
func TestPruneSkipsPinned(t *testing.T) {
	gb := memblob.OpenBucket(nil)
	t.Cleanup(func() { _ = gb.Close() })
	b := blob.New(gb, nil)
	ms := backups(t, b, "prod-a", 3)
	var pins retention.PinSet
	unpin := pins.Pin("prod-a", ms[0].ID)
	p := &retention.Pruner{Store: b, Destination: "mem", Policy: retention.KeepLast(1), Pins: &pins, Now: time.Now}

	report, err := p.Prune(t.Context(), "prod-a")
	require.NoError(t, err)
	require.Equal(t, 1, report.Count(retention.Deleted))
	require.Equal(t, 1, report.Count(retention.Skipped))
	for _, it := range report.Items {
		if it.Outcome == retention.Skipped {
			require.Equal(t, ms[0].ID, it.Entry.ID)
			require.True(t, strings.Contains(it.Reason, "pinned"), it.Reason)
		}
	}
	left := keysUnder(t, b, "prod-a/")
	require.Contains(t, left, "prod-a/"+ms[0].DataKey, "the pinned backup survives")
	require.Contains(t, left, "prod-a/"+backup.ManifestKey(ms[0].DataKey), "with its manifest")
	require.NotContains(t, left, "prod-a/"+ms[1].DataKey)

	unpin()
	report, err = p.Prune(t.Context(), "prod-a")
	require.NoError(t, err)
	require.Equal(t, 1, report.Count(retention.Deleted))
	require.NotContains(t, keysUnder(t, b, "prod-a/"), "prod-a/"+ms[0].DataKey)
}

// pinningStore is a store with object locks (none set) whose first lock
// lookup pins a backup: a restore that pins it while a prune is between
// its pin check and its deletes.
type pinningStore struct {
	*blob.Bucket
	pin  func()
	once sync.Once
}

func (s *pinningStore) SetRetention(context.Context, string, storage.Retention) error {
	return storage.ErrUnsupported
}

func (s *pinningStore) Retention(context.Context, string) (storage.Retention, error) {
	s.once.Do(s.pin)
	return storage.Retention{}, nil
}

// TestPinDuringPruneKeepsBackup: a backup pinned after the prune's first
// pin check, while it reads the backup's locks, is not deleted; and a pin
// taken while the prune deletes a backup returns only after the deletes,
// never with half a backup left.
func TestPinDuringPruneKeepsBackup(t *testing.T) {
	gb := memblob.OpenBucket(nil)
	t.Cleanup(func() { _ = gb.Close() })
	b := blob.New(gb, nil)
	ms := backups(t, b, "prod-a", 2)
	var pins retention.PinSet
	var unpin func()
	store := &pinningStore{Bucket: b, pin: func() { unpin = pins.Pin("prod-a", ms[0].ID) }}
	p := &retention.Pruner{Store: store, Destination: "mem", Policy: retention.KeepLast(1), Pins: &pins, Now: time.Now}

	report, err := p.Prune(t.Context(), "prod-a")
	require.NoError(t, err)
	require.NotNil(t, unpin, "the backup was pinned during the prune")
	require.Equal(t, 0, report.Count(retention.Deleted), "the pinned backup is not deleted")
	left := keysUnder(t, b, "prod-a/")
	require.Contains(t, left, "prod-a/"+ms[0].DataKey)
	require.Contains(t, left, "prod-a/"+backup.ManifestKey(ms[0].DataKey))
	unpin()

	// A pin during the deletes waits for them: the restore then finds no
	// backup, rather than a data object without its manifest.
	pinned := make(chan []string, 1)
	del := &deleteHook{Bucket: b, first: func() {
		go func() {
			unpin := pins.Pin("prod-a", ms[0].ID)
			defer unpin()
			var keys []string
			for info, err := range b.List(context.Background(), "prod-a/") {
				if err == nil {
					keys = append(keys, info.Key)
				}
			}
			pinned <- keys
		}()
	}}
	p.Store = del
	report, err = p.Prune(t.Context(), "prod-a")
	require.NoError(t, err)
	require.Equal(t, 1, report.Count(retention.Deleted))
	select {
	case left := <-pinned:
		require.NotContains(t, left, "prod-a/"+ms[0].DataKey, "the pin returned after every delete")
	case <-time.After(30 * time.Second):
		t.Fatal("the pin never returned")
	}
}

// deleteHook runs first at the first Delete.
type deleteHook struct {
	*blob.Bucket
	first func()
	once  sync.Once
}

func (d *deleteHook) Delete(ctx context.Context, key string) error {
	d.once.Do(d.first)
	return d.Bucket.Delete(ctx, key)
}

// deleteRecorder records the keys deleted, in order.
type deleteRecorder struct {
	*blob.Bucket
	mu      sync.Mutex
	deleted []string
}

func (d *deleteRecorder) Delete(ctx context.Context, key string) error {
	d.mu.Lock()
	d.deleted = append(d.deleted, key)
	d.mu.Unlock()
	return d.Bucket.Delete(ctx, key)
}

// TestPruneDeletesManifestBeforeData: a backup's manifest goes first, so a
// prune stopped in between leaves an orphan, never a manifest naming
// nothing.
func TestPruneDeletesManifestBeforeData(t *testing.T) {
	gb := memblob.OpenBucket(nil)
	t.Cleanup(func() { _ = gb.Close() })
	b := blob.New(gb, nil)
	ms := backups(t, b, "prod-a", 2)
	rec := &deleteRecorder{Bucket: b}
	p := &retention.Pruner{Store: rec, Destination: "mem", Policy: retention.KeepLast(1), Now: time.Now}
	report, err := p.Prune(t.Context(), "prod-a")
	require.NoError(t, err)
	require.Equal(t, 1, report.Count(retention.Deleted))
	require.Equal(t, []string{"prod-a/" + backup.ManifestKey(ms[0].DataKey), "prod-a/" + ms[0].DataKey}, rec.deleted)
}

// TestPinContext: PinContext pins as Pin does, and a context already
// ended takes no pin.
func TestPinContext(t *testing.T) {
	var s retention.PinSet
	unpin, err := s.PinContext(t.Context(), "prod-a", "x")
	require.NoError(t, err)
	require.True(t, s.Pinned("prod-a", "x"))
	unpin()
	require.False(t, s.Pinned("prod-a", "x"))

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	unpin, err = s.PinContext(ctx, "prod-a", "x")
	require.ErrorIs(t, err, context.Canceled)
	require.Nil(t, unpin)
	require.False(t, s.Pinned("prod-a", "x"))
}
