package restore_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"filippo.io/age"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	"go.uber.org/zap"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/internal/restoretest"
	"github.com/etcdbackup/etcdbackup/restore"
)

// allKeys reads every key under prefix.
func allKeys(t *testing.T, cli *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	resp, err := cli.Get(t.Context(), prefix, clientv3.WithPrefix())
	require.NoError(t, err)
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

// TestRoundTripMinIO backs up 10,000 keys of a real etcd to MinIO (zstd +
// age), deletes them, restores a new data directory from the backup and
// starts etcd on it: every key is back with its value.
func TestRoundTripMinIO(t *testing.T) {
	ctx := t.Context()
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	_, err := etcdtest.Fill(ctx, cli, etcdtest.FillOptions{Keys: 10000, Seed: 7})
	require.NoError(t, err)
	want := allKeys(t, cli, "/registry/")
	require.Len(t, want, 10000)
	values := map[string]bool{}
	for _, v := range want {
		values[v] = true
	}
	require.Len(t, values, 10000, "values are distinct")

	srv := miniotest.Start(t)
	bucket := newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{}))
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	m := runBackup(t, snapshotter, bucket, "prod-a", "before-delete", backup.Zstd, id.Recipient().String())

	del, err := cli.Delete(ctx, "/registry/", clientv3.WithPrefix())
	require.NoError(t, err)
	require.EqualValues(t, 10000, del.Deleted)

	sources := []restore.Source{{Name: "minio", Catalog: bucket}}
	found, err := restore.Find(ctx, sources, restore.Query{Cluster: "prod-a"})
	require.NoError(t, err)
	require.Equal(t, backup.KindBackup, found.Kind)
	require.Equal(t, m.ID, found.ID)
	require.Equal(t, "minio", found.Source)

	rec := &recorder{}
	r := &restore.Restorer{Identities: []age.Identity{id}, Observer: rec}
	parent := t.TempDir()
	dataDir := filepath.Join(parent, "restored.etcd")
	member, err := r.Restore(ctx, found, restore.Member{Name: "restored", DataDir: dataDir, PeerURLs: []string{"http://127.0.0.1:2380"}})
	require.NoError(t, err)
	require.Equal(t, dataDir, member.DataDir)
	require.Equal(t, []string{"restored.etcd"}, dirEntries(t, parent), "no staging directory left")
	require.Equal(t, []restore.EventKind{restore.Started, restore.Fetched, restore.Restored}, without(rec.kinds(), restore.Progress))

	restored := etcdtest.Start(t, etcdtest.WithDataDir(dataDir), etcdtest.WithName("restored"))
	require.Equal(t, member.MemberID, restored.ID(), "the member ID the restore reported")
	got := allKeys(t, restored.Client(t), "/registry/")
	require.Len(t, got, len(want))
	for k, v := range want {
		if got[k] != v {
			require.Failf(t, "key restored wrong", "key %s: got %d bytes, want %d", k, len(got[k]), len(v))
		}
	}
}

func without(kinds []restore.EventKind, drop restore.EventKind) []restore.EventKind {
	var out []restore.EventKind
	for _, k := range kinds {
		if k != drop {
			out = append(out, k)
		}
	}
	return out
}

// TestDamagedOnMinIO stores an encrypted backup on MinIO, then damages
// it: whatever the damage, fetch and restore fail with the right error and
// leave nothing behind.
func TestDamagedOnMinIO(t *testing.T) {
	ctx := t.Context()
	etcd := etcdtest.Start(t)
	_, err := etcdtest.Fill(ctx, etcd.Client(t), etcdtest.FillOptions{Keys: 500, Seed: 3})
	require.NoError(t, err)
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	other, err := age.GenerateX25519Identity()
	require.NoError(t, err)

	srv := miniotest.Start(t)
	bucket := newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{}))
	m := runBackup(t, snapshotter, bucket, "prod-a", "daily", backup.Zstd, id.Recipient().String())
	key := backup.ClusterPrefix("prod-a") + m.DataKey
	good := readAll(t, bucket, key)
	sources := []restore.Source{{Name: "minio", Catalog: bucket}}
	intact, err := restore.Find(ctx, sources, restore.Query{Cluster: "prod-a"})
	require.NoError(t, err)

	flip := func(at int) []byte {
		b := bytes.Clone(good)
		b[at] ^= 0x01
		return b
	}
	cases := []struct {
		name     string
		stored   []byte // nil: leave the object as it is
		identity *age.X25519Identity
		want     error
	}{
		{"wrong identity", nil, other, restore.ErrDecrypt},
		{"flipped byte in the payload", flip(len(good) / 2), id, restore.ErrIntegrity},
		{"flipped byte in the age header", flip(40), id, restore.ErrIntegrity},
		{"flipped last byte", flip(len(good) - 1), id, restore.ErrIntegrity},
		{"truncated", good[:len(good)*2/3], id, restore.ErrIntegrity},
		{"truncated to the header", good[:100], id, restore.ErrIntegrity},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stored := good
			if tc.stored != nil {
				stored = tc.stored
			}
			put(t, bucket, key, stored)
			t.Cleanup(func() { put(t, bucket, key, good) })

			r := &restore.Restorer{Identities: []age.Identity{tc.identity}}
			target := filepath.Join(t.TempDir(), "snapshot.db")
			_, err := r.Fetch(ctx, intact, target)
			require.ErrorIs(t, err, tc.want)
			if tc.want == restore.ErrIntegrity {
				require.NotErrorIs(t, err, restore.ErrDecrypt, "damage is not a key problem: %v", err)
			} else {
				require.NotErrorIs(t, err, restore.ErrIntegrity)
			}
			t.Logf("fetch: %v", err)
			requireNothingAt(t, target)

			dataDir := filepath.Join(t.TempDir(), "member")
			_, err = r.Restore(ctx, intact, restore.Member{Name: "m", DataDir: dataDir, PeerURLs: []string{"http://127.0.0.1:2380"}})
			require.ErrorIs(t, err, tc.want)
			requireNothingAt(t, dataDir)

			res, err := r.Drill(ctx, intact)
			require.ErrorIs(t, err, tc.want)
			require.False(t, res.Passed())
		})
	}

	t.Run("truncated object is listed as invalid", func(t *testing.T) {
		put(t, bucket, key, good[:len(good)-10])
		t.Cleanup(func() { put(t, bucket, key, good) })
		_, err := restore.Find(ctx, sources, restore.Query{Cluster: "prod-a"})
		require.ErrorIs(t, err, restore.ErrNoBackup)
		_, err = restore.Find(ctx, sources, restore.Query{Cluster: "prod-a", ID: m.ID})
		require.ErrorIs(t, err, restore.ErrNotRestorable)
	})
}

// TestLegacySnapshots uploads snapshots saved by etcd's own client code,
// raw and gzip-compressed as older backup jobs wrote them, into a cluster's
// folder by hand: they are listed as legacy and restore.
func TestLegacySnapshots(t *testing.T) {
	ctx := t.Context()
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	filled, err := etcdtest.Fill(ctx, cli, etcdtest.FillOptions{Keys: 800, Seed: 5})
	require.NoError(t, err)
	want := allKeys(t, cli, "/registry/")

	saved := filepath.Join(t.TempDir(), "etcdctl.db")
	_, err = snapshot.SaveWithVersion(ctx, zap.NewNop(), clientv3.Config{Endpoints: etcd.Endpoints()}, saved)
	require.NoError(t, err)
	raw, err := os.ReadFile(saved)
	require.NoError(t, err)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err = zw.Write(raw)
	require.NoError(t, err)
	require.NoError(t, zw.Close())

	srv := miniotest.Start(t)
	bucket := newS3(t, srv, srv.NewBucket(t, miniotest.BucketOptions{}))
	objects := map[string][]byte{
		"prod-a/etcd-snapshot-2023-01-01.db":  raw,
		"prod-a/etcd-snapshot-2023-01-02.gz":  gz.Bytes(),
		"prod-a/etcd-snapshot-2023-01-03-gzp": gz.Bytes(), // gzip, though the name does not say so
	}
	for k, body := range objects {
		put(t, bucket, k, body)
	}
	sources := []restore.Source{{Name: "minio", Catalog: bucket}}
	all, err := restore.List(ctx, sources, "prod-a")
	require.NoError(t, err)
	require.Len(t, all, len(objects))
	for _, b := range all {
		require.Equal(t, backup.KindLegacy, b.Kind, b.Key)
	}

	r := &restore.Restorer{}
	for key := range objects {
		name := filepath.Base(key)
		t.Run(name, func(t *testing.T) {
			b, err := restore.Find(ctx, sources, restore.Query{Cluster: "prod-a", ID: name})
			require.NoError(t, err)
			require.Equal(t, key, b.Key)

			target := filepath.Join(t.TempDir(), "snapshot.db")
			fetched, err := r.Fetch(ctx, b, target)
			require.NoError(t, err)
			require.False(t, fetched.ManifestChecked)
			wantCompression := backup.None
			if !bytes.Equal(objects[key], raw) {
				wantCompression = backup.Gzip
			}
			require.Equal(t, wantCompression, fetched.Compression)
			got, err := os.ReadFile(target)
			require.NoError(t, err)
			require.True(t, bytes.Equal(raw, got), "the fetched file is etcd's snapshot byte for byte")

			res, err := r.Drill(ctx, b)
			require.NoError(t, err)
			require.True(t, res.Passed())
			require.GreaterOrEqual(t, res.Status.TotalKeys, filled.Keys)
			require.Equal(t, filled.Revision, res.Status.Revision)
		})
	}

	// One of them all the way to a running member.
	b, err := restore.Find(ctx, sources, restore.Query{Cluster: "prod-a", ID: "etcd-snapshot-2023-01-02.gz"})
	require.NoError(t, err)
	dataDir := filepath.Join(t.TempDir(), "legacy.etcd")
	_, err = r.Restore(ctx, b, restore.Member{Name: "legacy", DataDir: dataDir, PeerURLs: []string{"http://127.0.0.1:2380"}})
	require.NoError(t, err)
	restored := etcdtest.Start(t, etcdtest.WithDataDir(dataDir), etcdtest.WithName("legacy"))
	require.Equal(t, want, allKeys(t, restored.Client(t), "/registry/"))
}

// TestRestoreClusterStartsThreeMembers fetches one backup once and
// restores the data directories of a three-member cluster, then starts the
// cluster on them.
func TestRestoreClusterStartsThreeMembers(t *testing.T) {
	ctx := t.Context()
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	_, err := etcdtest.Fill(ctx, cli, etcdtest.FillOptions{Keys: 300, Seed: 11})
	require.NoError(t, err)
	want := allKeys(t, cli, "/registry/")
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	bucket := memBucket(t)
	runBackup(t, snapshotter, bucket, "prod-b", "nightly", backup.Gzip)
	found, err := restore.Find(ctx, []restore.Source{{Name: "mem", Catalog: bucket}}, restore.Query{Cluster: "prod-b"})
	require.NoError(t, err)

	peers, clients := restoretest.FreeURLs(t, 3), restoretest.FreeURLs(t, 3)
	parent := t.TempDir()
	c := restore.Cluster{Token: "restored-prod-b", RevisionBump: 1000}
	for i := range 3 {
		c.Members = append(c.Members, restore.ClusterMember{
			Name: fmt.Sprintf("m%d", i), DataDir: filepath.Join(parent, fmt.Sprintf("m%d.etcd", i)), PeerURLs: []string{peers[i]},
		})
	}
	rec := &recorder{}
	r := &restore.Restorer{Observer: rec}
	restored, err := r.RestoreCluster(ctx, found, c)
	require.NoError(t, err)
	require.Len(t, restored, 3)
	require.ElementsMatch(t, []string{"m0.etcd", "m1.etcd", "m2.etcd"}, dirEntries(t, parent))
	fetches := 0
	for _, e := range rec.events {
		if e.Kind == restore.Fetched {
			fetches++
		}
	}
	require.Equal(t, 1, fetches, "one download for three members")

	var members []restoretest.Member
	for i, rm := range restored {
		require.Equal(t, c.Members[i].Name, rm.Name)
		require.Equal(t, restored[0].ClusterID, rm.ClusterID)
		members = append(members, restoretest.Member{Name: rm.Name, DataDir: rm.DataDir, PeerURL: peers[i], ClientURL: clients[i]})
	}
	servers := restoretest.StartMembers(t, members)
	for i, s := range servers {
		assert.Equal(t, restored[i].MemberID, uint64(s.Server.MemberID()), "member ID of %s", restored[i].Name)
		assert.Equal(t, restored[i].ClusterID, uint64(s.Server.Cluster().ID()))
	}
	rcli := restoretest.Client(t, clients...)
	list, err := rcli.MemberList(ctx)
	require.NoError(t, err)
	require.Len(t, list.Members, 3)
	for i := range 3 {
		got := allKeys(t, restoretest.Client(t, clients[i]), "/registry/")
		require.Equal(t, want, got, "member %d", i)
	}
	// The revision was bumped: the restored cluster is past the snapshot.
	resp, err := rcli.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	status, err := cli.Get(ctx, "x")
	require.NoError(t, err)
	require.GreaterOrEqual(t, resp.Header.Revision, status.Header.Revision+1000)
	// ... and compacted: history before the bump is gone.
	_, err = rcli.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(status.Header.Revision))
	require.ErrorContains(t, err, "compacted")
	// A write goes through the restored cluster's raft.
	_, err = rcli.Put(ctx, "after-restore", "ok")
	require.NoError(t, err)
}
