package restore_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/restore"
)

func TestMemberValidate(t *testing.T) {
	ok := restore.Member{Name: "m0", DataDir: "/var/lib/etcd", PeerURLs: []string{"https://10.0.0.1:2380"}}
	tests := []struct {
		name    string
		edit    func(*restore.Member)
		wantErr string
	}{
		{"valid alone", func(*restore.Member) {}, ""},
		{"valid in a cluster", func(m *restore.Member) {
			m.InitialCluster = "m0=https://10.0.0.1:2380,m1=https://10.0.0.2:2380"
		}, ""},
		{"two peer URLs", func(m *restore.Member) {
			m.PeerURLs = []string{"https://10.0.0.1:2380", "https://[fd00::1]:2380"}
			m.InitialCluster = "m0=https://10.0.0.1:2380,m0=https://[fd00::1]:2380"
		}, ""},
		{"no name", func(m *restore.Member) { m.Name = "" }, "empty member name"},
		{"name with comma", func(m *restore.Member) { m.Name = "a,b" }, "may not contain"},
		{"no data dir", func(m *restore.Member) { m.DataDir = "" }, "empty data directory"},
		{"no peer URLs", func(m *restore.Member) { m.PeerURLs = nil }, "no peer URLs"},
		{"peer URL without port", func(m *restore.Member) { m.PeerURLs = []string{"http://10.0.0.1"} }, "peer URLs"},
		{"peer URL not http", func(m *restore.Member) { m.PeerURLs = []string{"ftp://10.0.0.1:2380"} }, "peer URLs"},
		{"not in its cluster", func(m *restore.Member) { m.InitialCluster = "m1=https://10.0.0.2:2380" }, "not in its initial cluster"},
		{"peer URL differs from the cluster's", func(m *restore.Member) {
			m.InitialCluster = "m0=https://10.0.0.9:2380"
		}, "differ"},
		{"peer URL shared", func(m *restore.Member) {
			m.InitialCluster = "m0=https://10.0.0.1:2380,m1=https://10.0.0.1:2380"
		}, "belongs to"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := ok
			tc.edit(&m)
			err := m.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestClusterValidate(t *testing.T) {
	member := func(i int) restore.ClusterMember {
		return restore.ClusterMember{Name: fmt.Sprintf("m%d", i), DataDir: fmt.Sprintf("/d/m%d", i), PeerURLs: []string{fmt.Sprintf("http://10.0.0.%d:2380", i)}}
	}
	tests := []struct {
		name    string
		members []restore.ClusterMember
		wantErr string
	}{
		{"three", []restore.ClusterMember{member(0), member(1), member(2)}, ""},
		{"none", nil, "no members"},
		{"same name", []restore.ClusterMember{member(0), {Name: "m0", DataDir: "/d/x", PeerURLs: []string{"http://10.0.0.9:2380"}}}, "used twice"},
		{"same data dir", []restore.ClusterMember{member(0), {Name: "m1", DataDir: "/d/m0/", PeerURLs: []string{"http://10.0.0.9:2380"}}}, "share the data directory"},
		{"same peer URL", []restore.ClusterMember{member(0), {Name: "m1", DataDir: "/d/m1", PeerURLs: member(0).PeerURLs}}, "belongs to"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := restore.Cluster{Members: tc.members}.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestRestoreFile(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	raw := smallSnapshot(t)
	snap := writeFile(t, "snapshot.db", raw)
	member := func(dir string) restore.Member {
		return restore.Member{Name: "m0", DataDir: dir, PeerURLs: []string{"http://127.0.0.1:2380"}}
	}
	r := &restore.Restorer{}

	t.Run("into a new directory", func(t *testing.T) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "m0.etcd")
		rm, err := r.RestoreFile(t.Context(), snap, member(dir))
		require.NoError(t, err)
		require.Equal(t, dir, rm.DataDir)
		require.NotZero(t, rm.MemberID)
		require.NotZero(t, rm.ClusterID)
		require.Equal(t, []string{"m0.etcd"}, dirEntries(t, parent), "no temporary directory left")
		st, err := restore.Status(filepath.Join(dir, "member", "snap", "db"))
		require.NoError(t, err)
		require.EqualValues(t, 4, st.Revision)
		require.Equal(t, 3, st.TotalKeys)
		fi, err := os.Stat(dir)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "etcd wants its data directory private")

		_, err = r.RestoreFile(t.Context(), snap, member(dir))
		require.ErrorIs(t, err, restore.ErrTargetExists, "a restored directory is not empty")
	})

	t.Run("into an empty directory", func(t *testing.T) {
		dir := t.TempDir()
		_, err := r.RestoreFile(t.Context(), snap, member(dir))
		require.NoError(t, err)
		require.Contains(t, dirEntries(t, dir), "member")
	})

	t.Run("the same member IDs as etcd for the same flags", func(t *testing.T) {
		a, err := r.RestoreFile(t.Context(), snap, member(filepath.Join(t.TempDir(), "a")))
		require.NoError(t, err)
		b, err := r.RestoreFile(t.Context(), snap, member(filepath.Join(t.TempDir(), "b")))
		require.NoError(t, err)
		require.Equal(t, a.MemberID, b.MemberID)
		m := member(filepath.Join(t.TempDir(), "c"))
		m.ClusterToken = "another"
		c, err := r.RestoreFile(t.Context(), snap, m)
		require.NoError(t, err)
		require.NotEqual(t, a.ClusterID, c.ClusterID, "the token makes a new cluster")
	})

	t.Run("revision bump", func(t *testing.T) {
		m := member(filepath.Join(t.TempDir(), "m0"))
		m.RevisionBump = 1_000_000
		_, err := r.RestoreFile(t.Context(), snap, m)
		require.NoError(t, err)
		st, err := restore.Status(filepath.Join(m.DataDir, "member", "snap", "db"))
		require.NoError(t, err)
		require.EqualValues(t, 4+1_000_000, st.Revision)
	})

	refusals := []struct {
		name    string
		setup   func(t *testing.T, dir string) // dir does not exist yet
		wantErr error
	}{
		{"non-empty directory", func(t *testing.T, dir string) {
			require.NoError(t, os.Mkdir(dir, 0o700))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "keep"), nil, 0o600))
		}, restore.ErrTargetExists},
		{"a file", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(dir, nil, 0o600))
		}, restore.ErrTargetExists},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "m0")
			tc.setup(t, dir)
			_, err := r.RestoreFile(t.Context(), snap, member(dir))
			require.ErrorIs(t, err, tc.wantErr)
			require.Equal(t, []string{"m0"}, dirEntries(t, parent), "left as it was")
		})
	}

	damaged := []struct {
		name string
		body []byte
	}{
		{"flipped byte", flipAt(raw, len(raw)/2)},
		{"no trailer, as copied from a data directory", raw[:len(raw)-backup.TrailerSize]},
		{"truncated", raw[:len(raw)-1000]},
		{"empty", nil},
	}
	for _, tc := range damaged {
		t.Run(tc.name, func(t *testing.T) {
			bad := writeFile(t, "bad.db", tc.body)
			parent := t.TempDir()
			_, err := r.RestoreFile(t.Context(), bad, member(filepath.Join(parent, "m0")))
			require.ErrorIs(t, err, restore.ErrIntegrity)
			require.ErrorIs(t, err, backup.ErrSnapshotIntegrity)
			require.Empty(t, dirEntries(t, parent))
		})
	}

	t.Run("missing parent", func(t *testing.T) {
		_, err := r.RestoreFile(t.Context(), snap, member(filepath.Join(t.TempDir(), "no", "such", "m0")))
		require.ErrorContains(t, err, "parent")
	})

	t.Run("a bbolt file that is no etcd database", func(t *testing.T) {
		junk := bytes.Repeat([]byte{0xAB}, 4096)
		body := append(junk, sha256Of(junk)...)
		bad := writeFile(t, "junk.db", body)
		parent := t.TempDir()
		_, err := r.RestoreFile(t.Context(), bad, member(filepath.Join(parent, "m0")))
		require.Error(t, err)
		require.Empty(t, dirEntries(t, parent), "no half data directory")
	})
}

func TestRestoreClusterFile(t *testing.T) {
	snap := writeFile(t, "snapshot.db", smallSnapshot(t))
	parent := t.TempDir()
	c := restore.Cluster{Token: "t"}
	for i := range 3 {
		c.Members = append(c.Members, restore.ClusterMember{
			Name: fmt.Sprintf("m%d", i), DataDir: filepath.Join(parent, fmt.Sprintf("m%d", i)),
			PeerURLs: []string{fmt.Sprintf("http://10.0.0.%d:2380", i+1)},
		})
	}
	r := &restore.Restorer{}

	// One data directory taken: none is created.
	require.NoError(t, os.Mkdir(c.Members[2].DataDir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(c.Members[2].DataDir, "x"), nil, 0o600))
	_, err := r.RestoreClusterFile(t.Context(), snap, c)
	require.ErrorIs(t, err, restore.ErrTargetExists)
	require.Equal(t, []string{"m2"}, dirEntries(t, parent))

	require.NoError(t, os.RemoveAll(c.Members[2].DataDir))
	out, err := r.RestoreClusterFile(t.Context(), snap, c)
	require.NoError(t, err)
	require.Len(t, out, 3)
	ids := map[uint64]bool{}
	for i, m := range out {
		require.Equal(t, c.Members[i].Name, m.Name)
		require.Equal(t, out[0].ClusterID, m.ClusterID)
		ids[m.MemberID] = true
		st, err := restore.Status(filepath.Join(m.DataDir, "member", "snap", "db"))
		require.NoError(t, err)
		require.Equal(t, 3, st.TotalKeys)
	}
	require.Len(t, ids, 3, "distinct member IDs")
	require.Equal(t, []string{"m0", "m1", "m2"}, dirEntries(t, parent))
}
