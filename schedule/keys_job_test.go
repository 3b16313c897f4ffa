package schedule

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/drivers"
)

// TestKeysZipJob: a scheduled job of Kind backup.KindKeys, run by the
// scheduler on its clock, stores keys zips of its prefixes on a file
// destination, its retention counts them, and the newest imports into
// an empty etcd as the keys under the prefixes at its revision.
func TestKeysZipJob(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := newEtcdClient(t, srv)
	defer cli.Close()
	for _, k := range []string{"/a/1", "/a/2", "/a/\x00\xff/../x", "/b/1"} {
		_, err := cli.Put(t.Context(), k, "v1 "+k)
		require.NoError(t, err)
	}
	file, err := blob.Open(t.Context(), drivers.NewURLMux(nil), "file://"+t.TempDir(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = file.Close() })
	dests := memDestinations{"file": file}
	h := newHarness(t, utc("2026-01-01T00:00:00Z"), Config{Runner: etcdRunner(t, srv, dests)})
	h.start()

	job := Job{ID: "keys", Schedule: "@hourly", Cluster: "prod-a", Name: "hourly", Destinations: []string{"file"},
		Retention: retention.KeepLast(1), Kind: backup.KindKeys, Prefixes: []string{"/a/"}}
	require.NoError(t, h.s.Set(job))
	h.settle()
	for run := 1; run <= 2; run++ {
		if run == 2 { // the second run sees changed and new keys
			for _, k := range []string{"/a/1", "/a/3"} {
				_, err := cli.Put(t.Context(), k, fmt.Sprintf("v%d %s", run, k))
				require.NoError(t, err)
			}
		}
		h.advanceTo(h.clk.Now().Add(time.Hour))
		st := h.status(job.ID)
		require.NoError(t, st.LastError)
		require.EqualValues(t, run, st.Successes)
	}
	var kept []backup.Entry
	eventually(t, func() bool {
		entries, err := backup.ListBackups(t.Context(), file, "prod-a")
		require.NoError(t, err)
		kept = kept[:0]
		for _, e := range entries {
			require.Equal(t, backup.KindKeys, e.Kind, "%s", e.Key)
			kept = append(kept, e)
		}
		return len(kept) == 1
	}, "retention kept the newest keys zip")
	assert.EqualValues(t, 4, kept[0].Manifest.Keys, "the keys under /a/ only")

	found, err := restore.Find(t.Context(), []restore.Source{{Name: "file", Catalog: file}}, restore.Query{Cluster: "prod-a", Kind: backup.KindKeys})
	require.NoError(t, err)
	require.Equal(t, backup.KindKeys, found.Kind)
	path := filepath.Join(t.TempDir(), "keys.zip")
	fetched, err := (&restore.Restorer{TempDir: t.TempDir()}).Fetch(t.Context(), found, path)
	require.NoError(t, err)
	dst := etcdtest.Start(t, etcdtest.WithName("target"))
	dc := dst.Client(t)
	res, err := (&restore.Importer{Client: dc, ManifestChecked: fetched.ManifestChecked, TempDir: t.TempDir()}).ImportFile(t.Context(), path)
	require.NoError(t, err)
	require.True(t, res.Complete)
	rev := found.Manifest.Etcd.Revision.Low
	require.Equal(t, rev, res.Revision)
	want, err := cli.Get(t.Context(), "/a/", clientv3.WithPrefix(), clientv3.WithRev(rev))
	require.NoError(t, err)
	got, err := dc.Get(t.Context(), "/a/", clientv3.WithPrefix())
	require.NoError(t, err)
	require.Len(t, got.Kvs, len(want.Kvs))
	for i, kv := range want.Kvs {
		assert.Equal(t, string(kv.Key), string(got.Kvs[i].Key))
		assert.Equal(t, string(kv.Value), string(got.Kvs[i].Value))
	}
	assert.Equal(t, "v2 /a/1", string(got.Kvs[1].Value), "the newest run's keys (%s)", got.Kvs[1].Key)
	other, err := dc.Get(t.Context(), "/b/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	assert.Zero(t, other.Count, "nothing outside the job's prefixes")
}
