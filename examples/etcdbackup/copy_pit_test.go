package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
)

// TestCopyPointInTime copies what restores every point of the last day:
// the synthetic full backup the chain restores from at the window's start,
// the segments after it and the full backup taken within the day; neither
// the chain's own full nor its segments before the synthetic full, nor an
// older full backup.
func TestCopyPointInTime(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	require.NoError(t, os.Mkdir(src, 0o700))
	require.NoError(t, os.Mkdir(dst, 0o700))
	reg, err := destination.NewRegistry(destination.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close() })
	d, err := reg.Add(t.Context(), destination.Spec{Name: "primary", URL: "file://" + src})
	require.NoError(t, err)

	now := time.Now().UTC().Truncate(time.Second)
	put := func(m backup.Manifest) *backup.Manifest {
		t.Helper()
		data := fmt.Appendf(nil, "%s %d %d", m.Name, m.Etcd.Revision.Low, m.FirstRevision)
		sum := sha256.Sum256(data)
		m.Stored = backup.Digest{Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
		m.Raw = m.Stored
		m.Cluster, m.Destination, m.Compression, m.Completed = "prod", "primary", backup.None, m.Created.Add(time.Second)
		m.ID = backup.BackupID(m.Cluster, m.Name, m.Created, true)
		m.DataKey = backup.DataKey(m.ID, m.Created, m.Compression, false)
		if m.Format == 0 {
			m.Format = backup.ManifestFormat
		}
		require.NoError(t, d.Upload(context.Background(), &m, bytes.NewReader(data)))
		require.NoError(t, d.Commit(context.Background(), &m))
		// The store wrote it as it completed: its dates are not misdated.
		for _, key := range []string{m.DataKey, backup.ManifestKey(m.DataKey)} {
			require.NoError(t, os.Chtimes(filepath.Join(src, "prod", key), m.Completed, m.Completed))
		}
		return &m
	}
	fullAt := func(name string, ago time.Duration, rev int64) *backup.Manifest {
		return put(backup.Manifest{Name: name, Created: now.Add(-ago), Etcd: backup.EtcdInfo{Revision: backup.RevisionInfo{Low: rev, High: rev}}})
	}
	seg := func(chain *backup.Manifest, ago time.Duration, first, last int64) *backup.Manifest {
		return put(backup.Manifest{Format: backup.DeltaManifestFormat, Kind: backup.ManifestKindDelta, Name: fmt.Sprintf("delta-%d", first),
			Created: now.Add(-ago), FirstRevision: first, LastRevision: last, Chain: chain.ID})
	}
	old := fullAt("old", 100*time.Hour, 5)
	chain := fullAt("full", 72*time.Hour, 10)
	early := seg(chain, 71*time.Hour, 11, 20)
	syn := put(backup.Manifest{Name: "full", Created: now.Add(-70 * time.Hour),
		Etcd:      backup.EtcdInfo{Revision: backup.RevisionInfo{Low: 20, High: 20}},
		Synthetic: &backup.SyntheticInfo{Base: chain.ID, BaseRevision: 10, Chain: chain.ID, Revision: 20, Segments: 1}})
	s2 := seg(chain, 30*time.Hour, 21, 30)
	s3 := seg(chain, time.Hour, 31, 40)
	recent := fullAt("recent", 2*time.Hour, 40)

	tr := &transcript{t: t}
	r := tr.ok("copy", "--from=file://"+src, "--to=file://"+dst, "--to-name=offsite", "--cluster=prod", "--point-in-time=24h")
	require.Contains(t, r.stdout, "copied 4, resumed 0, skipped 0, failed 0, not copied 0", r.stdout)
	to, err := reg.Add(t.Context(), destination.Spec{Name: "offsite", URL: "file://" + dst})
	require.NoError(t, err)
	entries, err := backup.ListBackups(t.Context(), to, "prod")
	require.NoError(t, err)
	var got []string
	for _, e := range entries {
		got = append(got, e.ID)
	}
	slices.Sort(got)
	want := []string{syn.ID, s2.ID, s3.ID, recent.ID}
	slices.Sort(want)
	require.Equal(t, want, got, "not %s, %s nor %s", old.ID, chain.ID, early.ID)

	tr.fails(exitUsage, "copy", "--from=file://"+src, "--to=file://"+dst, "--cluster=prod", "--point-in-time=-1h")
	// A backup named outside the window is not copied, and said so.
	r = tr.fails(exitFailure, "copy", "--from=file://"+src, "--to=file://"+dst, "--to-name=offsite", "--cluster=prod",
		"--point-in-time=24h", "--backup="+old.ID)
	require.Contains(t, r.stderr, "not-copied "+old.ID, r.stderr)
}
