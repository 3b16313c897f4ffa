package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/retention"
)

// fileStore is a file destination the test writes backups to as their
// writers would, its store's times chosen.
type fileStore struct {
	t   *testing.T
	dir string
	d   *destination.Destination
}

func newFileStore(t *testing.T, name string) *fileStore {
	dir := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.Mkdir(dir, 0o700))
	reg, err := destination.NewRegistry(destination.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close() })
	d, err := reg.Add(t.Context(), destination.Spec{Name: name, URL: "file://" + dir})
	require.NoError(t, err)
	return &fileStore{t: t, dir: dir, d: d}
}

// full commits a full backup of config "full" created at created and
// low, as its store wrote it at stored.
func (f *fileStore) full(created time.Time, low int64, stored time.Time) *backup.Manifest {
	t := f.t
	m := backup.Manifest{Name: "full", Created: created, Etcd: backup.EtcdInfo{Revision: backup.RevisionInfo{Low: low, High: low}}}
	data := fmt.Appendf(nil, "full %d", low)
	sum := sha256.Sum256(data)
	m.Stored = backup.Digest{Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
	m.Raw = m.Stored
	m.Cluster, m.Destination, m.Compression, m.Completed = "prod", f.d.Name(), backup.None, m.Created.Add(time.Second)
	m.ID = backup.BackupID(m.Cluster, m.Name, m.Created, true)
	m.DataKey = backup.DataKey(m.ID, m.Created, m.Compression, false)
	m.Format = backup.ManifestFormat
	require.NoError(t, f.d.Upload(context.Background(), &m, bytes.NewReader(data)))
	require.NoError(t, f.d.Commit(context.Background(), &m))
	for _, key := range []string{m.DataKey, backup.ManifestKey(m.DataKey)} {
		require.NoError(t, os.Chtimes(filepath.Join(f.dir, "prod", key), stored, stored))
	}
	return &m
}

// pruneOutcomes runs a dry-run prune with args and returns each backup's
// outcome by ID.
func pruneOutcomes(tr *transcript, args ...string) map[string]string {
	r := tr.ok(append([]string{"prune", "--cluster=prod", "--dry-run", "--output=json"}, args...)...)
	var out struct{ Items []pruneItem }
	require.NoError(tr.t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	got := map[string]string{}
	for _, it := range out.Items {
		got[it.ID] = it.Outcome
	}
	return got
}

// TestPruneDoesNotTrustCopiesByDefault: a writer with put-only
// credentials on a primary store (it cannot delete) commits a backdated
// backup that looks like a copy (its run token is the copy token anyone
// can derive, the source's store time it records its own choice; here an
// `etcdbackup copy` from a store of its own makes it). `etcdbackup
// prune --gfs days=7` of the primary dates it as any backup: written now,
// dated days before, it is misdated, kept and counted by no rule, and
// the genuine backup of that day keeps its daily slot. With --copies
// (the destination holds copies) its recorded time is trusted, as for a
// replication target.
func TestPruneDoesNotTrustCopiesByDefault(t *testing.T) {
	primary, forger := newFileStore(t, "primary"), newFileStore(t, "forger")
	day := time.Now().UTC().Truncate(24 * time.Hour)
	var genuine []*backup.Manifest
	for i := 1; i <= 5; i++ {
		c := day.Add(-time.Duration(i)*24*time.Hour + 10*time.Hour)
		genuine = append(genuine, primary.full(c, int64(100-i), c.Add(time.Second)))
	}
	c := day.Add(-3*24*time.Hour + 20*time.Hour)
	forger.full(c, 1, c.Add(time.Second))
	tr := &transcript{t: t}
	tr.ok("copy", "--from=file://"+forger.dir, "--to=file://"+primary.dir, "--to-name=primary", "--cluster=prod", "--all")

	dest := "--destination=file://" + primary.dir
	got := pruneOutcomes(tr, dest, "--gfs=days=7")
	require.Equal(t, string(retention.Kept), got[genuine[2].ID], "the genuine backup of day D-3: %v", got)
	got = pruneOutcomes(tr, dest, "--gfs=days=7", "--copies")
	require.Equal(t, string(retention.WouldDelete), got[genuine[2].ID], "with --copies the copy's recorded time is trusted: %v", got)
}

// TestPruneCopiesWrittenLongAfterTheirBackups: a new offsite destination
// seeded with `etcdbackup copy` holds copies written days after their
// backups. `prune --copies` dates them by the source's store times they
// record and keep-last 2 deletes three; without --copies they are
// misdated (written long after their dates): kept, counted by no rule.
func TestPruneCopiesWrittenLongAfterTheirBackups(t *testing.T) {
	src, dst := newFileStore(t, "primary"), newFileStore(t, "offsite")
	tb := time.Now().Add(-5 * 24 * time.Hour).Truncate(time.Second)
	for i := range 5 {
		c := tb.Add(time.Duration(i) * 12 * time.Hour)
		src.full(c, int64(10*(i+1)), c.Add(time.Second))
	}
	tr := &transcript{t: t}
	tr.ok("copy", "--from=file://"+src.dir, "--to=file://"+dst.dir, "--to-name=offsite", "--cluster=prod", "--all")
	dest := "--destination=file://" + dst.dir
	count := func(got map[string]string, outcome retention.Outcome) int {
		n := 0
		for _, o := range got {
			if o == string(outcome) {
				n++
			}
		}
		return n
	}
	got := pruneOutcomes(tr, dest, "--keep-last=2")
	require.Equal(t, 0, count(got, retention.WouldDelete), "without --copies: %v", got)
	got = pruneOutcomes(tr, dest, "--keep-last=2", "--copies")
	require.Equal(t, 3, count(got, retention.WouldDelete), "with --copies: %v", got)
}
