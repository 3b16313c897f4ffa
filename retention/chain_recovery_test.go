package retention_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
)

// recoveryEntries is a chain (f1, its segment to 500) that a follower
// left when its destination went away, a scheduled full backup of no
// chain (fs, revision 1000) taken meanwhile, and the full backup of a
// recovery (f2, revision 5000) that starts a new chain while the old
// chain's tail, 501 to 5000, is still being caught up: the full backup
// records the tail, and with seg so does the new chain's first segment.
func recoveryEntries(seg bool) (f1, fs, f2 backup.Entry, entries []backup.Entry) {
	f1, fs, f2 = fullEntry(0, 100), fullEntry(24*time.Hour, 1000), fullEntry(71*time.Hour, 5000)
	f2.Manifest.Recovery = &backup.RecoveryTail{Chain: f1.ID, Until: 5000}
	entries = []backup.Entry{f1, segmentEntry(10*time.Hour, 101, 500, f1.ID), fs, f2}
	if seg {
		s := segmentEntry(71*time.Hour+30*time.Minute, 5001, 5100, f2.ID)
		s.Manifest.Recovery = &backup.RecoveryTail{Chain: f1.ID, Until: 5000}
		entries = append(entries, s)
	}
	return f1, fs, f2, entries
}

// TestPointInTimeKeepsRecoveringChain: retention with a 30-hour window,
// run while a recovery's tail is caught up, keeps the old chain's full
// backup and segment, though the chain's last stored revision is before
// the window's base (fs) and keep-last 1 deletes full backups: the
// tail's segments, stored after, continue them, and every revision of
// the window restores once they are.
func TestPointInTimeKeepsRecoveringChain(t *testing.T) {
	for _, seg := range []bool{false, true} {
		f1, fs, f2, entries := recoveryEntries(seg)
		now := chainEpoch.Add(72 * time.Hour)
		plan, err := retention.MakePlan("c", entries, retention.KeepLast(1), now, retention.PlanOptions{})
		require.NoError(t, err)
		pit, err := retention.PointInTime(30 * time.Hour).Apply(plan)
		require.NoError(t, err)
		var kept []backup.Entry
		for _, d := range pit.Decisions {
			if d.Action == retention.Keep {
				kept = append(kept, d.Entry)
			}
		}
		decided := map[string]retention.Action{}
		for _, d := range pit.Decisions {
			decided[d.Entry.ID] = d.Action
		}
		require.Equal(t, retention.Keep, decided[f1.ID], "the recovering chain's full backup (segment of the new chain: %v)", seg)
		require.Equal(t, retention.Keep, decided[entries[1].ID], "the recovering chain's segment (segment of the new chain: %v)", seg)
		require.Equal(t, retention.Keep, decided[fs.ID], "the window's base")
		require.Equal(t, retention.Keep, decided[f2.ID], "the newest")

		// The tail stored: every revision from the base on restores.
		kept = append(kept, segmentEntry(72*time.Hour, 501, 5000, f1.ID))
		for rev := int64(1000); rev <= 5000; rev += 7 {
			require.True(t, restorable(kept, rev), "revision %d", rev)
		}
	}
}

// TestPointInTimeRecoveredChainOutOfWindow: once the window's base is the
// recovery's full backup, the old chain's restore points are all before
// it: its segments go (the tail's record keeps nothing the window does
// not need).
func TestPointInTimeRecoveredChainOutOfWindow(t *testing.T) {
	f1, _, f2, entries := recoveryEntries(true)
	entries = append(entries, segmentEntry(72*time.Hour, 501, 5000, f1.ID))
	now := chainEpoch.Add(200 * time.Hour)
	plan, err := retention.MakePlan("c", entries, retention.KeepLast(1), now, retention.PlanOptions{})
	require.NoError(t, err)
	pit, err := retention.PointInTime(30 * time.Hour).Apply(plan)
	require.NoError(t, err)
	decided := map[string]retention.Action{}
	for _, d := range pit.Decisions {
		decided[d.Entry.ID] = d.Action
	}
	require.Equal(t, retention.Keep, decided[f2.ID], "the window's base")
	require.Equal(t, retention.Delete, decided[f1.ID])
	require.Equal(t, retention.Delete, decided[entries[1].ID])
	require.Equal(t, retention.Delete, decided[entries[5].ID])
}

// putRecoveryFull stores the full backup a follower's recovery takes at
// rev, recording the tail of chain it catches up, as its pipeline commits
// one.
func putRecoveryFull(t *testing.T, b storage.Bucket, created time.Time, rev int64, chain string) *backup.Manifest {
	t.Helper()
	body := []byte(strings.Repeat("s", 64))
	m := &backup.Manifest{Format: backup.ManifestFormat, Cluster: "prod-a", Name: "full", Created: created, Completed: created,
		Compression: backup.None, Destination: "store",
		Etcd:     backup.EtcdInfo{Revision: backup.RevisionInfo{Low: rev, High: rev}},
		Raw:      backup.Digest{Size: 64, SHA256: strings.Repeat("ab", 32)},
		Stored:   backup.Digest{Size: 64, SHA256: strings.Repeat("ab", 32)},
		Recovery: &backup.RecoveryTail{Chain: chain, Until: rev}}
	m.ID = backup.BackupID(m.Cluster, m.Name, created, true)
	m.DataKey = backup.DataKey(m.ID, created, backup.None, false)
	u := &backup.BucketUploader{Bucket: b}
	require.NoError(t, u.Upload(t.Context(), m, bytes.NewReader(body)))
	require.NoError(t, u.Commit(t.Context(), m))
	return m
}

// TestPruneKeepsChainOfRecoveryTail: a follower's chain was its full
// backup alone when the destination went away; the recovery's full
// backup, committed, records the tail it catches up. Keep-last 1 without
// a point-in-time rule deletes no chain's full backup: the old one stays
// (the tail's segments continue it), the recovery's as the newest.
func TestPruneKeepsChainOfRecoveryTail(t *testing.T) {
	b := fileBucket(t)
	now := time.Now()
	old := fullAt(t, b, "full", now.Add(-2*time.Hour), 100)
	rec := putRecoveryFull(t, b, now.Add(-time.Minute), 5000, old.ID)
	p := &retention.Pruner{Store: b, Destination: "store", Policy: retention.KeepLast(1)}
	report, err := p.Prune(t.Context(), "prod-a")
	require.NoError(t, err)
	require.Equal(t, map[string]retention.Outcome{old.ID: retention.Kept, rec.ID: retention.Kept}, outcomes(report))
}
