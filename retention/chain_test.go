package retention_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"iter"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/miniotest"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
)

var chainEpoch = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func fullEntry(at time.Duration, rev int64) backup.Entry {
	t := chainEpoch.Add(at)
	id := fmt.Sprintf("c-full-%s", t.Format(backup.TimestampLayout))
	return backup.Entry{Kind: backup.KindBackup, Cluster: "c", ID: id, Created: t,
		Key: "c/" + backup.DataKey(id, t, backup.Zstd, false), ManifestKey: "c/" + id + backup.ManifestSuffix,
		Manifest: &backup.Manifest{ID: id, Cluster: "c", Created: t, Completed: t.Add(time.Minute),
			Etcd: backup.EtcdInfo{Revision: backup.RevisionInfo{Low: rev, High: rev}}}}
}

func segmentEntry(at time.Duration, first, last int64, chain string) backup.Entry {
	t := chainEpoch.Add(at)
	id := fmt.Sprintf("c-delta-%d-%s", first, t.Format(backup.TimestampLayout))
	return backup.Entry{Kind: backup.KindDelta, Cluster: "c", ID: id, Created: t,
		Key: "c/" + backup.DataKey(id, t, backup.Zstd, false), ManifestKey: "c/" + id + backup.ManifestSuffix,
		Manifest: &backup.Manifest{ID: id, Cluster: "c", Created: t, Kind: backup.ManifestKindDelta,
			FirstRevision: first, LastRevision: last, Chain: chain}}
}

// restorable reports whether rev can be restored from the kept entries: a
// kept full backup at or before it, and kept segments of a chain it
// continues (as restore.FindPoint replays them) without a gap from the
// full to rev.
func restorable(kept []backup.Entry, rev int64) bool {
	for _, f := range kept {
		if f.Kind != backup.KindBackup || f.Manifest.Etcd.Revision.High > rev {
			continue
		}
		cur := f.Manifest.Etcd.Revision.Low
		for progress := true; cur < rev && progress; {
			progress = false
			for _, s := range kept {
				if s.Kind == backup.KindDelta && f.Continues(s.Manifest.Chain) && s.Manifest.FirstRevision <= cur+1 && s.Manifest.LastRevision > cur {
					cur, progress = s.Manifest.LastRevision, true
				}
			}
		}
		if cur >= rev {
			return true
		}
	}
	return false
}

// TestPointInTimePlan applies a 30-hour window to two chains (the second
// after a gap) under keep-last 1: the segments before the window's base
// go, the base and the second chain's full stay, and every revision from
// the base on stays restorable.
func TestPointInTimePlan(t *testing.T) {
	f1, f2, f3, f4 := fullEntry(0, 100), fullEntry(24*time.Hour, 1000), fullEntry(48*time.Hour, 2000), fullEntry(60*time.Hour, 3000)
	entries := []backup.Entry{
		f1,
		segmentEntry(10*time.Hour, 101, 500, f1.ID),
		segmentEntry(20*time.Hour, 501, 999, f1.ID),
		f2,
		segmentEntry(30*time.Hour, 1000, 1500, f1.ID),
		segmentEntry(40*time.Hour, 1501, 2100, f1.ID),
		f3,
		segmentEntry(50*time.Hour, 2101, 2500, f1.ID),
		// compaction: a gap from 2501 to 3000
		f4,
		segmentEntry(65*time.Hour, 3001, 3100, f4.ID),
	}
	now := chainEpoch.Add(72 * time.Hour)
	plan, err := retention.MakePlan("c", entries, retention.KeepLast(1), now, retention.PlanOptions{})
	require.NoError(t, err)
	require.Empty(t, deletedKinds(plan, backup.KindDelta), "without the chain rule no segment is deleted")

	pit, err := retention.PointInTime(30 * time.Hour).Apply(plan)
	require.NoError(t, err)
	var kept []backup.Entry
	decided := map[string]retention.Action{}
	for _, d := range pit.Decisions {
		decided[d.Entry.ID] = d.Action
		if d.Action == retention.Keep {
			kept = append(kept, d.Entry)
		}
	}
	// f2, the window's base, is a full backup of no chain: restore
	// replays chain f1 only from f1, which stays with all its segments.
	for _, i := range []int{1, 2, 4, 5, 7, 9} {
		require.Equal(t, retention.Keep, decided[entries[i].ID], "segment %s", entries[i].ID)
	}
	require.Equal(t, retention.Keep, decided[f2.ID], "the window's base")
	require.Equal(t, retention.Keep, decided[f4.ID], "the newest, a chain's base")
	require.Equal(t, retention.Keep, decided[f1.ID], "before the window, but chain f1's points in it replay from it")
	require.Equal(t, retention.Delete, decided[f3.ID], "inside the window, not a chain base: the segments cover it")
	for rev := int64(1000); rev <= 2500; rev++ {
		require.True(t, restorable(kept, rev), "revision %d", rev)
	}
	for rev := int64(3000); rev <= 3100; rev++ {
		require.True(t, restorable(kept, rev), "revision %d", rev)
	}
	require.Equal(t, retention.Delete, plan.Decisions[3].Action, "the input plan is not changed")

	// A window longer than the history keeps every segment after the
	// oldest full backup.
	all, err := retention.PointInTime(1000 * time.Hour).Apply(plan)
	require.NoError(t, err)
	require.Empty(t, deletedKinds(all, backup.KindDelta))
	_, err = retention.PointInTime(0).Apply(plan)
	require.Error(t, err)
}

func deletedKinds(p *retention.Plan, kind backup.Kind) []string {
	var out []string
	for _, d := range p.Deletes() {
		if d.Entry.Kind == kind {
			out = append(out, d.Entry.ID)
		}
	}
	return out
}

// storeTimes is a store whose listing gives the modification times of at
// where it has them: a store that wrote those objects then.
type storeTimes struct {
	storage.Bucket
	at map[string]time.Time
}

func (s storeTimes) List(ctx context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error] {
	return func(yield func(storage.ObjectInfo, error) bool) {
		for info, err := range s.Bucket.List(ctx, prefix) {
			if t, ok := s.at[info.Key]; ok {
				info.ModTime = t
			}
			if !yield(info, err) {
				return
			}
		}
	}
}

// storedAt returns b as a store that wrote the objects of each of ms a
// minute after they were created, and those of newest later by later: its
// newest objects.
func storedAt(b storage.Bucket, later time.Duration, newest *backup.Manifest, ms ...*backup.Manifest) storeTimes {
	s := storeTimes{Bucket: b, at: map[string]time.Time{}}
	for _, m := range ms {
		s.at[m.Cluster+"/"+m.DataKey] = m.Created.Add(time.Minute)
		s.at[m.Cluster+"/"+backup.ManifestKey(m.DataKey)] = m.Created.Add(time.Minute)
	}
	s.at[newest.Cluster+"/"+newest.DataKey] = newest.Created.Add(later)
	s.at[newest.Cluster+"/"+backup.ManifestKey(newest.DataKey)] = newest.Created.Add(later)
	return s
}

// putSegment stores a delta segment's data and manifest as a follower
// does, through the uploader.
func putSegment(t *testing.T, b storage.Bucket, created time.Time, first, last int64, chain string) *backup.Manifest {
	t.Helper()
	body := []byte(strings.Repeat("x", 64))
	m := &backup.Manifest{Format: backup.DeltaManifestFormat, Kind: backup.ManifestKindDelta, Cluster: "prod-a",
		Name: fmt.Sprintf("delta-%d", first), Created: created, Completed: created, Compression: backup.None,
		FirstRevision: first, LastRevision: last, Chain: chain, Destination: "minio",
		Raw: backup.Digest{Size: 64, SHA256: strings.Repeat("ab", 32)}, Stored: backup.Digest{Size: 64, SHA256: strings.Repeat("ab", 32)}}
	m.ID = backup.BackupID(m.Cluster, m.Name, created, true)
	m.DataKey = backup.DataKey(m.ID, created, backup.None, false)
	u := &backup.BucketUploader{Bucket: b}
	require.NoError(t, u.Upload(t.Context(), m, bytes.NewReader(body)))
	require.NoError(t, u.Commit(t.Context(), m))
	return m
}

// revSnapshotter serves a small valid snapshot stream at a revision.
type revSnapshotter struct{ rev int64 }

func (s revSnapshotter) Snapshot(ctx context.Context) (*backup.Snapshot, error) {
	body := bytes.Repeat([]byte{byte(s.rev)}, 64*512)
	sum := sha256.Sum256(body)
	stream := append(body, sum[:]...)
	return backup.NewSnapshot(io.NopCloser(bytes.NewReader(stream)), backup.SnapshotInfo{RevisionLow: s.rev, RevisionHigh: s.rev}, nil), nil
}

// TestPrunePointInTimeOnMinIO prunes full backups and segments on MinIO
// with keep-last 1 and a 90-minute window, by a pruner whose clock is two
// hours ahead of the store's (so that every full backup was stored before
// the window by both clocks): the full backups before the base and the
// segment before the window's base are deleted, manifest and data; a
// pinned segment before the base is skipped; the base and the segments
// after it stay.
func TestPrunePointInTimeOnMinIO(t *testing.T) {
	srv := miniotest.Start(t)
	b := newBucket(t, srv, false)
	real := time.Now()
	var fulls []*backup.Manifest
	for i, rev := range []int64{10, 20, 30} {
		created := real.Add(-time.Duration(3-i) * time.Hour)
		p := &backup.Pipeline{Snapshotter: revSnapshotter{rev}, Now: func() time.Time { return created }}
		res, err := p.Run(t.Context(), backup.Request{Cluster: "prod-a", Name: "full", Scheduled: true,
			Targets: []backup.Target{{Destination: "minio", Uploader: &backup.BucketUploader{Bucket: b}}}})
		require.NoError(t, err)
		fulls = append(fulls, res.Outcomes[0].Manifest)
	}
	gone := putSegment(t, b, real.Add(-170*time.Minute), 11, 25, fulls[0].ID)
	pinned := putSegment(t, b, real.Add(-130*time.Minute), 26, 30, fulls[0].ID)
	// A follower started a new chain from the base (restore continues a
	// full backup only with its own chain's segments).
	after := putSegment(t, b, real.Add(-10*time.Minute), 31, 40, fulls[2].ID)

	pins := &retention.PinSet{}
	unpin := pins.Pin("prod-a", pinned.ID)
	defer unpin()
	chains := retention.PointInTime(90 * time.Minute)
	// Two hours later by the pruner's clock and the store's (its newest
	// object is the last segment, stored then): every full backup is
	// before the window by both.
	p := &retention.Pruner{Store: storedAt(b, 2*time.Hour, after, fulls[0], fulls[1], fulls[2], gone, pinned), Destination: "minio", Policy: retention.KeepLast(1), Chains: &chains, Pins: pins,
		Now: func() time.Time { return time.Now().Add(2 * time.Hour) }}
	report, err := p.Prune(t.Context(), "prod-a")
	require.NoError(t, err)
	outcome := map[string]retention.Outcome{}
	for _, it := range report.Items {
		outcome[it.Entry.ID] = it.Outcome
	}
	require.Equal(t, map[string]retention.Outcome{
		fulls[0].ID: retention.Deleted, fulls[1].ID: retention.Deleted, fulls[2].ID: retention.Kept,
		gone.ID: retention.Deleted, pinned.ID: retention.Skipped, after.ID: retention.Kept,
	}, outcome)
	keys := keysUnder(t, b, "prod-a/")
	for _, m := range []*backup.Manifest{fulls[0], fulls[1], gone} {
		require.NotContains(t, keys, "prod-a/"+m.DataKey)
		require.NotContains(t, keys, "prod-a/"+backup.ManifestKey(m.DataKey))
	}
	for _, m := range []*backup.Manifest{fulls[2], pinned, after} {
		require.Contains(t, keys, "prod-a/"+m.DataKey)
		require.Contains(t, keys, "prod-a/"+backup.ManifestKey(m.DataKey))
	}
}
