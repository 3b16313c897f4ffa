package retention_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/etcdbackup/etcdbackup/storage"
	"io"
	"iter"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
)

var rvNow = time.Date(2026, 4, 1, 12, 0, 0, 0, time.UTC)

func rvFull(cfg string, at time.Time, rev int64) backup.Entry {
	id := backup.BackupID("c", cfg, at, true)
	key := "c/" + backup.DataKey(id, at, backup.Zstd, false)
	return backup.Entry{Kind: backup.KindBackup, Cluster: "c", ID: id, Created: at, Key: key, ManifestKey: backup.ManifestKey(key),
		Manifest: &backup.Manifest{ID: id, Cluster: "c", Name: cfg, Created: at, Completed: at.Add(time.Minute),
			Etcd: backup.EtcdInfo{Revision: backup.RevisionInfo{Low: rev, High: rev}}}}
}

func rvSeg(at time.Time, first, last int64, chain string) backup.Entry {
	id := backup.BackupID("c", fmt.Sprintf("delta-%d", first), at, true)
	key := "c/" + backup.DataKey(id, at, backup.Zstd, false)
	return backup.Entry{Kind: backup.KindDelta, Cluster: "c", ID: id, Created: at, Key: key, ManifestKey: backup.ManifestKey(key),
		Manifest: &backup.Manifest{ID: id, Cluster: "c", Name: fmt.Sprintf("delta-%d", first), Created: at, Kind: backup.ManifestKindDelta,
			FirstRevision: first, LastRevision: last, Chain: chain}}
}

// The follower of config "cont" resumed after the newest full backup of
// any config, so its chain starts from an "hourly" full. Pruning "cont"
// with a 7-day window owns that chain (hourly is not continuous). Its
// window's base, a cont full, is not the chain's, and restore replays a
// chain only from its own full: the whole chain stays, and its first full
// backup with it.
func TestReviewFollowerChainFromOtherConfigNeverPruned(t *testing.T) {
	var entries []backup.Entry
	h0 := rvFull("hourly", rvNow.AddDate(0, 0, -30), 1)
	entries = append(entries, h0)
	for d := 29; d >= 1; d-- {
		at := rvNow.AddDate(0, 0, -d)
		rev := int64(30-d) * 1000
		entries = append(entries, rvSeg(at.Add(-time.Minute), rev-999, rev, h0.ID)) // chain of h0
		entries = append(entries, rvFull("hourly", at, rev+1))
	}
	// a cont full taken 20 days ago: the base of cont's window
	f := rvFull("cont", rvNow.AddDate(0, 0, -20), 10001)
	entries = append(entries, f)
	mods := map[string]time.Time{}
	for _, e := range entries {
		mods[e.ManifestKey] = e.Created.Add(2 * time.Minute)
	}
	plan, err := retention.MakePlan("c", entries, retention.KeepLast(3), rvNow, retention.PlanOptions{Name: "cont", ModTimes: mods})
	require.NoError(t, err)
	out, err := retention.PointInTime(7 * 24 * time.Hour).Apply(plan)
	require.NoError(t, err)
	var kept []backup.Entry
	deleted := 0
	for _, d := range out.Decisions {
		if d.Action == retention.Keep {
			kept = append(kept, d.Entry)
		}
		if d.Entry.Kind != backup.KindDelta {
			continue
		}
		// The base (cont's full) and the hourly fulls continue no chain:
		// restore replays the window's points from h0, so the whole chain
		// stays, and h0 with it.
		require.Equal(t, retention.Keep, d.Action, "%s: %s", d.Entry.ID, d.Reason)
		if d.Action == retention.Delete {
			deleted++
		}
	}
	require.Zero(t, deleted)
	require.Equal(t, retention.Keep, decisionsByID(out)[h0.ID].Action)
	require.True(t, restorable(kept, 10500))
	require.True(t, restorable(kept, 29000))
	require.Empty(t, out.Misdated())

	// Listed as another continuous config, hourly keeps its chain.
	out, err = retention.ChainPolicy{Window: 7 * 24 * time.Hour, Others: []string{"hourly"}}.Apply(plan)
	require.NoError(t, err)
	for _, d := range out.Decisions {
		if d.Entry.Kind == backup.KindDelta {
			require.Equal(t, retention.Keep, d.Action, d.Entry.ID)
		}
	}
}

type rvUploads struct {
	storage.Bucket
	ups     []storage.Upload
	aborted []storage.Upload
}

func (s *rvUploads) IncompleteUploads(_ context.Context, prefix string) iter.Seq2[storage.Upload, error] {
	return func(yield func(storage.Upload, error) bool) {
		for _, u := range s.ups {
			if strings.HasPrefix(u.Key, prefix) && !yield(u, nil) {
				return
			}
		}
	}
}
func (s *rvUploads) AbortUpload(_ context.Context, u storage.Upload) error {
	s.aborted = append(s.aborted, u)
	return nil
}

type mtimeShift struct {
	storage.Bucket
	d time.Duration
}

func (m mtimeShift) List(ctx context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error] {
	return func(yield func(storage.ObjectInfo, error) bool) {
		for info, err := range m.Bucket.List(ctx, prefix) {
			info.ModTime = info.ModTime.Add(m.d)
			if !yield(info, err) {
				return
			}
		}
	}
}

// A writer whose clock jumped back (RTC reset, NTP step) dates its backups
// in the past. The store saw them now (ModTimes), but only future-dating is
// distrusted too: the plan keeps them, reported misdated.
func TestReviewBackdatedByWriterDeletedByMaxAge(t *testing.T) {
	good1 := rvFull("hourly", rvNow.Add(-3*time.Hour), 100)
	good2 := rvFull("hourly", rvNow.Add(-2*time.Hour), 200)
	// clock reset: dated 30 days ago, really taken 1h and 10m ago
	bad1 := rvFull("hourly", rvNow.AddDate(0, 0, -30), 300)
	bad2 := rvFull("hourly", rvNow.AddDate(0, 0, -30).Add(50*time.Minute), 400)
	entries := []backup.Entry{bad1, bad2, good1, good2}
	mods := map[string]time.Time{
		good1.ManifestKey: good1.Created.Add(time.Minute), good2.ManifestKey: good2.Created.Add(time.Minute),
		bad1.ManifestKey: rvNow.Add(-time.Hour), bad2.ManifestKey: rvNow.Add(-10 * time.Minute),
	}
	plan, err := retention.MakePlan("c", entries, retention.Policy{KeepLast: 5, MaxAge: 7 * 24 * time.Hour}, rvNow,
		retention.PlanOptions{Name: "hourly", ModTimes: mods})
	require.NoError(t, err)
	got := decisionsByID(plan)
	for _, e := range entries {
		t.Logf("%s rev %d: %s (%s)", e.ID, e.Manifest.Etcd.Revision.Low, got[e.ID].Action, got[e.ID].Reason)
	}
	for _, e := range []backup.Entry{bad1, bad2} {
		require.Equal(t, retention.Keep, got[e.ID].Action)
		require.Equal(t, retention.ReasonBeforeStore, got[e.ID].Reason)
	}
	require.Len(t, plan.Misdated(), 2)
}

// A pruner whose clock runs 2 days fast: the window's start is bounded by
// the store's clock, so a 7-day window keeps 7 real days.
func TestReviewFastPrunerShrinksWindow(t *testing.T) {
	var entries []backup.Entry
	var prev string
	revAtDay := func(d int) int64 { return int64(15+d) * 1000 } // d = -14..0
	for d := -14; d <= -1; d++ {
		at := rvNow.AddDate(0, 0, d)
		f := rvFull("cont", at, revAtDay(d))
		if prev != "" {
			entries = append(entries, rvSeg(at.Add(-time.Minute), revAtDay(d-1)+1, revAtDay(d), prev))
		}
		entries = append(entries, f)
		prev = f.ID
	}
	entries = append(entries, rvSeg(rvNow.Add(-time.Minute), revAtDay(-1)+1, revAtDay(0), prev))
	mods := map[string]time.Time{}
	for _, e := range entries {
		mods[e.ManifestKey] = e.Created.Add(2 * time.Minute) // the store's clock is right
	}
	pruner := rvNow.Add(48 * time.Hour)
	plan, err := retention.MakePlan("c", entries, retention.KeepLast(1), pruner, retention.PlanOptions{Name: "cont", ModTimes: mods})
	require.NoError(t, err)
	out, err := retention.PointInTime(7 * 24 * time.Hour).Apply(plan)
	require.NoError(t, err)
	var kept []backup.Entry
	for _, d := range out.Decisions {
		if d.Action == retention.Keep {
			kept = append(kept, d.Entry)
		}
		if d.Reason == retention.ReasonWindowBase {
			t.Logf("base: %s", d.Entry.ID)
		}
	}
	point := revAtDay(-6) - 500 // 6.5 real days ago: inside the 7-day window
	t.Logf("revision %d (6.5 days ago) restorable: %v", point, restorable(kept, point))
	require.True(t, restorable(kept, point))

	// keep-within and max-age age by the store's clock too.
	for _, policy := range []retention.Policy{{KeepWithin: 7 * 24 * time.Hour}, {KeepLast: 20, MaxAge: 7 * 24 * time.Hour}} {
		plan, err = retention.MakePlan("c", entries, policy, pruner, retention.PlanOptions{Name: "cont", ModTimes: mods})
		require.NoError(t, err)
		for _, d := range plan.Decisions {
			if d.Entry.Kind == backup.KindBackup && d.Entry.Created.After(rvNow.AddDate(0, 0, -6).Add(-time.Hour)) {
				require.Equal(t, retention.Keep, d.Action, "%s: %s", d.Entry.ID, d.Reason)
			}
		}
	}
}

// An orphan (or an abandoned multipart upload) that is the newest object
// of a quiet folder is aged by the pruner's clock: no newer object
// confirms the store's.
func TestReviewNewestOrphanNeverCollected(t *testing.T) {
	f := rvFull("hourly", rvNow.AddDate(0, 0, -10), 100)
	orphanAt := rvNow.AddDate(0, 0, -3)
	oid := backup.BackupID("c", "hourly", orphanAt, true)
	okey := "c/" + backup.DataKey(oid, orphanAt, backup.Zstd, false)
	orphan := backup.Entry{Kind: backup.KindOrphan, Cluster: "c", ID: backup.DataKey(oid, orphanAt, backup.Zstd, false), Key: okey, Created: orphanAt}
	mods := map[string]time.Time{f.ManifestKey: f.Created, f.Key: f.Created, okey: orphanAt}
	plan, err := retention.MakePlan("c", []backup.Entry{f, orphan}, retention.KeepLast(1), rvNow, retention.PlanOptions{ModTimes: mods})
	require.NoError(t, err)
	d := decisionsByID(plan)[orphan.ID]
	t.Logf("%s: %s", d.Action, d.Reason)
	require.Equal(t, retention.Delete, d.Action, "3-day-old orphan, grace 24h")
}

// Teardown of a cluster whose last backup died mid-upload 3 days ago: the
// upload is the newest thing the store has seen: it is aged by the
// pruner's clock and aborted.
func TestReviewTeardownLeavesLastStaleUpload(t *testing.T) {
	b := fileBucket(t)
	fullAt(t, b, "hourly", time.Now().Add(-10*24*time.Hour), 1) // file mtime: now
	s := &rvUploads{Bucket: b}
	at := time.Now().Add(-3 * 24 * time.Hour)
	key := "prod-a/" + backup.DataKey(backup.BackupID("prod-a", "hourly", at, true), at, backup.Zstd, false)
	s.ups = []storage.Upload{{Key: key, ID: "u1", Initiated: at}}
	// the store's newest object predates the upload (backdate the listing's mtimes)
	s.Bucket = mtimeShift{b, -5 * 24 * time.Hour}
	report, err := (&retention.Teardown{Store: s, Destination: "store"}).Run(t.Context(), "prod-a")
	require.NoError(t, err)
	t.Logf("aborted: %v, report aborted: %v", s.aborted, report.AbortedUploads)
	require.Len(t, s.aborted, 1)
	require.Len(t, report.AbortedUploads, 1)
}

// The misdated gauge is labelled by config and kind as well: each config
// prunes with its own scope, and another's prune does not hide it.
func TestReviewMisdatedGaugeOverwrittenByOtherConfig(t *testing.T) {
	future := rvFull("hourly", rvNow.AddDate(0, 0, 2), 500) // writer 2 days fast
	entries := []backup.Entry{rvFull("hourly", rvNow.Add(-time.Hour), 100), rvFull("daily", rvNow.Add(-2*time.Hour), 90), future}
	m := retention.NewMetrics()
	for _, cfg := range []string{"hourly", "daily"} {
		plan, err := retention.MakePlan("c", entries, retention.KeepLast(1), rvNow, retention.PlanOptions{Name: cfg})
		require.NoError(t, err)
		m.Record(&retention.Report{Cluster: "c", Destination: "s3", Plan: plan})
	}
	require.Equal(t, 1.0, metricValue(t, m, retention.MetricMisdated, "backup_name", "hourly"), "hourly's misdated backup")
	require.Equal(t, 0.0, metricValue(t, m, retention.MetricMisdated, "backup_name", "daily"))
}

// A manifest that is read but names a data object which is not its own
// (copied or renamed) is kept for inspection, and so is the data object it
// names: never an orphan while that manifest exists.
func TestReviewDataOfInconsistentManifestClaimed(t *testing.T) {
	b := fileBucket(t)
	m := fullAt(t, b, "hourly", time.Now().Add(-time.Hour), 5)
	at := time.Now().Add(-72 * time.Hour)
	named := backup.DataKey(backup.BackupID("prod-a", "hourly", at, true), at, backup.Zstd, false)
	rc, err := b.Get(t.Context(), "prod-a/"+backup.ManifestKey(m.DataKey))
	require.NoError(t, err)
	raw, err := io.ReadAll(rc)
	require.NoError(t, rc.Close())
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))
	doc["dataKey"] = named
	raw, err = json.Marshal(doc)
	require.NoError(t, err)
	other := time.Now().Add(-2 * time.Hour)
	otherKey := "prod-a/" + backup.ManifestKey(backup.DataKey(backup.BackupID("prod-a", "hourly", other, true), other, backup.Zstd, false))
	require.NoError(t, b.Put(t.Context(), otherKey, bytes.NewReader(raw), nil))
	// The named data object is the store's newest: aged by the pruner.
	require.NoError(t, b.Put(t.Context(), "prod-a/"+named, strings.NewReader("a snapshot"), nil))

	// The store wrote everything two days ago: the named data object is
	// past the orphan grace by every clock.
	p := &retention.Pruner{Store: mtimeShift{b, -48 * time.Hour}, Destination: "store", Policy: retention.KeepLast(1)}
	report, err := p.Prune(t.Context(), "prod-a")
	require.NoError(t, err)
	for _, it := range report.Items {
		t.Logf("%s %s: %s (%s)", it.Entry.Kind, it.Entry.Key, it.Outcome, it.Reason)
	}
	require.Contains(t, keysUnder(t, b, "prod-a/"), "prod-a/"+named)
	require.Contains(t, keysUnder(t, b, "prod-a/"), otherKey)
}
