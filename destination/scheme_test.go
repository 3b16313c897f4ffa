package destination_test

import (
	"bytes"
	"context"
	"io"
	"iter"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/storage"
)

// vault is the kind of small backend a host writes for its own store:
// objects in a map, behind storage.Bucket.
type vault struct {
	mu      sync.Mutex
	objects map[string][]byte
}

func (v *vault) Put(ctx context.Context, key string, r io.Reader, _ *storage.PutOptions) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.objects[key] = b
	return nil
}

func (v *vault) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	b, ok := v.objects[key]
	if !ok {
		return nil, storage.Errorf("get", key, storage.ErrNotFound, nil)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (v *vault) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	b, ok := v.objects[key]
	if !ok {
		return storage.ObjectInfo{}, storage.Errorf("stat", key, storage.ErrNotFound, nil)
	}
	return storage.ObjectInfo{Key: key, Size: int64(len(b))}, nil
}

func (v *vault) List(ctx context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error] {
	return func(yield func(storage.ObjectInfo, error) bool) {
		v.mu.Lock()
		var keys []string
		for k := range v.objects {
			if strings.HasPrefix(k, prefix) {
				keys = append(keys, k)
			}
		}
		v.mu.Unlock()
		slices.Sort(keys)
		for _, k := range keys {
			if info, err := v.Stat(ctx, k); err == nil && !yield(info, nil) {
				return
			}
		}
	}
}

func (v *vault) Delete(ctx context.Context, key string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.objects, key)
	return nil
}

// TestHostScheme: a host's own backend, registered for its scheme, is a
// named destination like any other: added, checked, synced, validated for
// a backup config, backed up to from a real etcd and restored from.
func TestHostScheme(t *testing.T) {
	ctx := testCtx(t)
	vaults := map[string]*vault{}
	opened := []string{}
	r := newRegistry(t, destination.Options{Schemes: map[string]destination.Opener{
		"vault": func(ctx context.Context, loc destination.Location) (storage.Bucket, error) {
			opened = append(opened, loc.Bucket+"?"+loc.Params)
			v := &vault{objects: map[string][]byte{}}
			vaults[loc.Bucket] = v
			return v, nil
		},
	}})
	d, err := r.Add(ctx, destination.Spec{Name: "default", URL: "vault://team-a/seed-eu?tier=cold"})
	require.NoError(t, err)
	require.Equal(t, []string{"team-a?tier=cold"}, opened)
	require.Equal(t, "vault://team-a/seed-eu?tier=cold", d.Location().String())
	st, err := r.Check(ctx, "default")
	require.NoError(t, err)
	require.True(t, st.Available(), "%+v", st)
	_, err = r.Add(ctx, destination.Spec{Name: "other", URL: "vault://team-a/seed-eu/nested"})
	require.ErrorIs(t, err, destination.ErrLocationInUse)
	_, err = r.Add(ctx, destination.Spec{Name: "unknown", URL: "tape://lib/a"})
	require.ErrorIs(t, err, destination.ErrInvalidURL)
	_, err = r.ValidateBackupConfig(destination.BackupConfig{Cluster: "prod-a", Name: "hourly", Destination: "default"}, nil)
	require.NoError(t, err)

	etcd := etcdtest.Start(t)
	_, err = etcd.Client(t).Put(ctx, "/registry/k", "v")
	require.NoError(t, err)
	snap, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	res, err := (&backup.Pipeline{Snapshotter: snap}).Run(ctx, backup.Request{Cluster: "prod-a", Name: "hourly", Scheduled: true, Targets: []backup.Target{d.Target()}})
	require.NoError(t, err)
	for k := range vaults["team-a"].objects {
		require.True(t, strings.HasPrefix(k, "seed-eu/prod-a/"), k)
	}

	inv, err := r.Sync(ctx, "default")
	require.NoError(t, err)
	require.Len(t, inv.Cluster("prod-a"), 1)
	b, err := restore.Find(ctx, []restore.Source{{Name: "default", Catalog: d}}, restore.Query{Cluster: "prod-a"})
	require.NoError(t, err)
	require.Equal(t, res.ID, b.ID)
	drill, err := (&restore.Restorer{TempDir: t.TempDir()}).Drill(ctx, b)
	require.NoError(t, err)
	require.True(t, drill.Passed())

	_, err = destination.NewRegistry(destination.Options{Schemes: map[string]destination.Opener{"s3": nil}})
	require.Error(t, err)
}
