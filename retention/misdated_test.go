package retention_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
)

// withRevisions gives the entries (oldest first) revisions 10, 20, ...
func withRevisions(entries []backup.Entry) []backup.Entry {
	for i := range entries {
		rev := int64(10 * (i + 1))
		entries[i].ManifestKey = entries[i].Key + backup.ManifestSuffix
		entries[i].Manifest.Etcd.Revision = backup.RevisionInfo{Low: rev, High: rev}
	}
	return entries
}

func decisionsByID(p *retention.Plan) map[string]retention.Decision {
	out := map[string]retention.Decision{}
	for _, d := range p.Decisions {
		out[d.Entry.ID] = d
	}
	return out
}

// TestPlanFutureDated: a backup dated beyond the clock skew does not take
// a keep-last slot, and a host whose clock runs fast does not push
// correctly dated backups out; the newest backup by revision stays
// whatever its date.
func TestPlanFutureDated(t *testing.T) {
	t.Run("a year ahead under keep-last 1", func(t *testing.T) {
		entries := withRevisions(history(now.AddDate(0, 0, -2), now.Add(-time.Hour), now.AddDate(1, 0, 0)))
		plan, err := retention.MakePlan("c", entries, retention.KeepLast(1), now, retention.PlanOptions{})
		require.NoError(t, err)
		got := decisionsByID(plan)
		require.Equal(t, retention.Keep, got[entries[1].ID].Action, "the newest correctly dated backup")
		require.Equal(t, retention.Keep, got[entries[2].ID].Action, "the future one is kept, counted by no rule")
		require.Equal(t, retention.ReasonFuture, got[entries[2].ID].Reason)
		require.Equal(t, retention.Delete, got[entries[0].ID].Action)
		require.Len(t, plan.Misdated(), 1)
	})
	t.Run("a host 48 hours fast under the default policy", func(t *testing.T) {
		var times []time.Time
		for i := range 20 {
			times = append(times, now.Add(-time.Duration(i)*time.Hour))               // correct
			times = append(times, now.Add(48*time.Hour-time.Duration(i)*time.Minute)) // fast
		}
		entries := withRevisions(history(times...))
		plan, err := retention.MakePlan("c", entries, retention.Policy{}, now, retention.PlanOptions{})
		require.NoError(t, err)
		require.Empty(t, plan.Deletes(), "every correctly dated backup within keep-last 20 stays")
	})
	t.Run("within the skew counts", func(t *testing.T) {
		entries := withRevisions(history(now.Add(-2*time.Hour), now.Add(-time.Hour), now.Add(10*time.Minute)))
		plan, err := retention.MakePlan("c", entries, retention.KeepLast(1), now, retention.PlanOptions{})
		require.NoError(t, err)
		require.Len(t, plan.Deletes(), 2, "ten minutes ahead is clock skew, not a misdated backup")
	})
	t.Run("backdated with the highest revision", func(t *testing.T) {
		entries := withRevisions(history(now.AddDate(0, 0, -3), now.Add(-2*time.Hour), now.Add(-time.Hour)))
		// The oldest by date holds the newest state: its writer's clock
		// ran days slow.
		entries[0].Manifest.Etcd.Revision = backup.RevisionInfo{Low: 99, High: 99}
		plan, err := retention.MakePlan("c", entries, retention.KeepLast(1), now, retention.PlanOptions{})
		require.NoError(t, err)
		got := decisionsByID(plan)
		require.Equal(t, retention.ReasonNewestRevision, got[entries[0].ID].Reason)
		require.Equal(t, retention.ReasonNewest, got[entries[2].ID].Reason)
		require.Equal(t, retention.Delete, got[entries[1].ID].Action)
	})
}

// TestPlanMisdatedByStore: a backup dated after the store wrote its
// manifest (the writer's clock ran fast, days ago) is not trusted even
// once its date has passed; its age by the store is what it is.
func TestPlanMisdatedByStore(t *testing.T) {
	entries := withRevisions(history(now.Add(-3*time.Hour), now.Add(-2*time.Hour), now.Add(-time.Hour)))
	mods := map[string]time.Time{}
	for _, e := range entries {
		mods[e.ManifestKey] = e.Created
	}
	mods[entries[2].ManifestKey] = now.Add(-49 * time.Hour) // written two days ago by a clock 48 h fast
	entries[2].Manifest.Etcd.Revision = backup.RevisionInfo{Low: 5, High: 5}
	plan, err := retention.MakePlan("c", entries, retention.KeepLast(1), now, retention.PlanOptions{ModTimes: mods})
	require.NoError(t, err)
	got := decisionsByID(plan)
	require.Equal(t, retention.ReasonAfterStore, got[entries[2].ID].Reason)
	require.Equal(t, retention.ReasonNewest, got[entries[1].ID].Reason)
	require.Equal(t, retention.Delete, got[entries[0].ID].Action)

	// A store whose clock runs behind every writer: all misdated, all
	// kept, all reported.
	for k := range mods {
		mods[k] = mods[k].Add(-time.Hour)
	}
	plan, err = retention.MakePlan("c", entries, retention.KeepLast(1), now, retention.PlanOptions{ModTimes: mods})
	require.NoError(t, err)
	require.Empty(t, plan.Deletes())
	require.Len(t, plan.Misdated(), 3)
	plan, err = retention.MakePlan("c", entries, retention.KeepLast(1), now, retention.PlanOptions{ModTimes: mods, ClockSkew: 2 * time.Hour})
	require.NoError(t, err)
	require.Len(t, plan.Misdated(), 1, "a wider skew trusts all but the one two days off")
}

// TestPlanClaimsDataOfUnreadableManifest: a data object whose manifest
// exists but cannot be read is never an orphan, however old.
func TestPlanClaimsDataOfUnreadableManifest(t *testing.T) {
	created := now.Add(-72 * time.Hour)
	id := "c-n-" + created.Format(backup.TimestampLayout)
	data := "c/" + backup.DataKey(id, created, backup.Zstd, false)
	entries := []backup.Entry{
		{Kind: backup.KindInvalid, Cluster: "c", ID: "x", Key: backup.ManifestKey(data), ManifestKey: backup.ManifestKey(data), Created: created},
		{Kind: backup.KindOrphan, Cluster: "c", ID: "y", Key: data, Created: created},
		{Kind: backup.KindOrphan, Cluster: "c", ID: "z", Key: "c/" + backup.DataKey("c-n-other", created, backup.Zstd, false), Created: created},
	}
	plan, err := retention.MakePlan("c", entries, retention.KeepLast(1), now, retention.PlanOptions{})
	require.NoError(t, err)
	require.Equal(t, retention.Keep, plan.Decisions[1].Action)
	require.Equal(t, retention.ReasonClaimed, plan.Decisions[1].Reason)
	require.Equal(t, retention.Delete, plan.Decisions[2].Action, "an orphan without a manifest is still collected")

	// Aged by the store too: the newest object listed bounds its clock.
	mods := map[string]time.Time{entries[2].Key: created, "c/newer": created.Add(time.Hour)}
	plan, err = retention.MakePlan("c", entries[2:], retention.KeepLast(1), now, retention.PlanOptions{ModTimes: mods})
	require.NoError(t, err)
	require.Equal(t, retention.Keep, plan.Decisions[0].Action, "one hour old by the store's clock")
	mods["c/newer"] = created.Add(25 * time.Hour)
	plan, err = retention.MakePlan("c", entries[2:], retention.KeepLast(1), now, retention.PlanOptions{ModTimes: mods})
	require.NoError(t, err)
	require.Equal(t, retention.Delete, plan.Decisions[0].Action)
}

// TestPointInTimeBackdatedFull: a full backup dated before the window but
// holding a later state (its writer's clock ran slow) is not the window's
// base when a full backup after it by date records a lower revision, or
// when the store wrote it inside the window.
func TestPointInTimeBackdatedFull(t *testing.T) {
	now := chainEpoch.Add(72 * time.Hour)
	f1 := fullEntry(24*time.Hour, 1000)
	g := fullEntry(60*time.Hour, 2000)   // honest, before the window
	bad := fullEntry(64*time.Hour, 2900) // dated after g, written at 71 h
	h := fullEntry(68*time.Hour, 2850)   // honest, inside the window
	// A follower started a chain from g (restore continues a full backup
	// only with its own chain's segments).
	seg1 := segmentEntry(40*time.Hour, 1001, 2000, f1.ID)
	seg2 := segmentEntry(65*time.Hour, 2001, 2800, g.ID)
	seg3 := segmentEntry(71*time.Hour, 2801, 3000, g.ID)
	window := retention.PointInTime(6 * time.Hour) // from 66 h: revision 2800 on

	t.Run("revision order", func(t *testing.T) {
		entries := []backup.Entry{f1, seg1, g, bad, seg2, h, seg3}
		plan, err := retention.MakePlan("c", entries, retention.KeepLast(1), now, retention.PlanOptions{})
		require.NoError(t, err)
		pit, err := window.Apply(plan)
		require.NoError(t, err)
		got := decisionsByID(pit)
		require.Equal(t, retention.ReasonWindowBase, got[g.ID].Reason, "the base is g, not the backdated full")
		require.Equal(t, retention.Keep, got[seg2.ID].Action, "revisions 2001 to 2800 restore from g")
		require.Equal(t, retention.Delete, got[seg1.ID].Action)
	})
	t.Run("store time", func(t *testing.T) {
		entries := []backup.Entry{f1, seg1, g, bad, seg2, seg3}
		mods := map[string]time.Time{f1.ManifestKey: chainEpoch.Add(24 * time.Hour), g.ManifestKey: chainEpoch.Add(60 * time.Hour),
			bad.ManifestKey: chainEpoch.Add(71 * time.Hour)}
		plan, err := retention.MakePlan("c", entries, retention.KeepLast(3), now, retention.PlanOptions{ModTimes: mods})
		require.NoError(t, err)
		pit, err := window.Apply(plan)
		require.NoError(t, err)
		got := decisionsByID(pit)
		require.Equal(t, retention.Keep, got[seg2.ID].Action)
		require.Equal(t, retention.Keep, got[g.ID].Action)
	})
	t.Run("restamped by a copy", func(t *testing.T) {
		entries := []backup.Entry{f1, seg1, g, seg2, seg3}
		mods := map[string]time.Time{f1.ManifestKey: now.Add(-time.Minute), g.ManifestKey: now.Add(-time.Minute)}
		plan, err := retention.MakePlan("c", entries, retention.KeepLast(3), now, retention.PlanOptions{ModTimes: mods})
		require.NoError(t, err)
		pit, err := window.Apply(plan)
		require.NoError(t, err)
		require.Empty(t, pit.Deletes(), "no date to trust: the base is the lowest revision")
	})
}

// TestPointInTimeClockSkew: the window's base is a full backup completed
// at least the plan's clock skew before the window.
func TestPointInTimeClockSkew(t *testing.T) {
	f1, f2 := fullEntry(0, 100), fullEntry(24*time.Hour, 200)
	seg := segmentEntry(12*time.Hour, 101, 200, f1.ID)
	now := f2.Manifest.Completed.Add(6*time.Hour + 20*time.Minute) // f2 is 20 minutes before a 6 h window
	for _, tc := range []struct {
		skew time.Duration
		want retention.Action
	}{{0, retention.Delete}, {30 * time.Minute, retention.Keep}, {10 * time.Minute, retention.Delete}} {
		plan, err := retention.MakePlan("c", []backup.Entry{f1, seg, f2}, retention.KeepLast(2), now, retention.PlanOptions{ClockSkew: tc.skew})
		require.NoError(t, err)
		pit, err := retention.PointInTime(6 * time.Hour).Apply(plan)
		require.NoError(t, err)
		require.Equal(t, tc.want, decisionsByID(pit)[seg.ID].Action, "skew %s", tc.skew)
	}
}

// TestPlanAgeAtNow: a store quiet for two days ages its backups at its
// newest write; with AgeAtNow (a copy's selection over its source's
// times) they are aged at the plan's now, the store's times still
// checking their dates.
func TestPlanAgeAtNow(t *testing.T) {
	entries := withRevisions(history(now.Add(-5*24*time.Hour), now.Add(-3*24*time.Hour), now.Add(-2*24*time.Hour)))
	mod := map[string]time.Time{}
	for _, e := range entries {
		mod[e.ManifestKey] = e.Manifest.Created.Add(time.Minute)
	}
	pol := retention.Policy{KeepLast: 3, MaxAge: 4 * 24 * time.Hour}
	plan, err := retention.MakePlan("c", entries, pol, now, retention.PlanOptions{ModTimes: mod})
	require.NoError(t, err)
	require.Empty(t, plan.Deletes(), "aged at the store's newest write, two days ago")
	plan, err = retention.MakePlan("c", entries, pol, now, retention.PlanOptions{ModTimes: mod, AgeAtNow: true})
	require.NoError(t, err)
	require.Len(t, plan.Deletes(), 1, "aged at now")
	require.Equal(t, entries[0].ID, plan.Deletes()[0].Entry.ID)
	mod[entries[1].ManifestKey] = now // written three days after its date
	plan, err = retention.MakePlan("c", entries, pol, now, retention.PlanOptions{ModTimes: mod, AgeAtNow: true})
	require.NoError(t, err)
	require.Len(t, plan.Misdated(), 1, "the store's times still check the dates")
}

// TestPlanCopyRecordingALaterSourceTime: a copy (PlanOptions.Copies) is
// dated by the time it records its source's store wrote it, but no
// source's store wrote a backup after this store wrote its copy: a copy
// recording such a time (forged, or its stores' clocks far apart) is
// dated by this store's time as any backup. Written ten days after its
// date, it is misdated: kept, counted by no rule.
func TestPlanCopyRecordingALaterSourceTime(t *testing.T) {
	entries := withRevisions(history(now.Add(-10*24*time.Hour), now.Add(-time.Hour)))
	mod := map[string]time.Time{entries[0].ManifestKey: now, entries[1].ManifestKey: now.Add(-time.Hour)}
	copies := func(*backup.Manifest) bool { return true }
	pol := retention.Policy{KeepLast: 1, MaxAge: 7 * 24 * time.Hour}
	for name, tc := range map[string]struct {
		recorded time.Time
		action   retention.Action
	}{
		"when it completed":                {entries[0].Created.Add(2 * time.Second), retention.Delete},
		"ten years ahead":                  {now.AddDate(10, 0, 0), retention.Keep},
		"an hour after this store's write": {now.Add(time.Hour), retention.Keep},
	} {
		entries[0].Manifest.SourceStored = tc.recorded
		plan, err := retention.MakePlan("c", entries, pol, now, retention.PlanOptions{ModTimes: mod, Copies: copies})
		require.NoError(t, err)
		require.Equal(t, tc.action, decisionsByID(plan)[entries[0].ID].Action, name)
	}
}
