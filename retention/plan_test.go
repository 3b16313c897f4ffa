package retention_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
)

var now = time.Date(2026, 11, 22, 12, 30, 0, 0, time.UTC)

// history makes KindBackup entries of cluster "c" created at the given
// times, oldest first as backup.ListBackups returns them.
func history(times ...time.Time) []backup.Entry {
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	out := make([]backup.Entry, len(times))
	for i, t := range times {
		id := fmt.Sprintf("c-n-%s", t.UTC().Format(backup.TimestampLayout))
		out[i] = backup.Entry{
			Kind: backup.KindBackup, Cluster: "c", ID: id, Created: t,
			Key: "c/" + backup.DataKey(id, t, backup.Zstd, false), ManifestKey: "c/x" + backup.ManifestSuffix,
			Manifest: &backup.Manifest{ID: id, Cluster: "c", Created: t},
		}
	}
	return out
}

// hourly returns n backups, one an hour, the newest at now.
func hourly(n int) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = now.Add(-time.Duration(i) * time.Hour)
	}
	return out
}

func kept(t *testing.T, p *retention.Plan) []time.Time {
	t.Helper()
	var out []time.Time
	for _, d := range p.Decisions {
		require.NotEmpty(t, d.Reason, "every decision has a reason")
		if d.Action == retention.Keep && d.Entry.Kind == backup.KindBackup {
			out = append(out, d.Entry.Created)
		}
	}
	return out
}

func TestPlanPolicies(t *testing.T) {
	tests := []struct {
		name    string
		times   []time.Time
		policy  retention.Policy
		want    int         // backups kept
		newest  []time.Time // kept, exactly (when set)
		wantErr bool
	}{
		{name: "default keeps 20", times: hourly(30), policy: retention.Policy{}, want: 20},
		{name: "keep last 3", times: hourly(10), policy: retention.KeepLast(3), newest: hourly(3)},
		{name: "keep last more than exist", times: hourly(2), policy: retention.KeepLast(5), want: 2},
		{name: "keep last 1 keeps the newest", times: hourly(5), policy: retention.KeepLast(1), newest: hourly(1)},
		{name: "keep within", times: hourly(10), policy: retention.Policy{KeepWithin: 3*time.Hour + time.Minute}, want: 4},
		{name: "max age only keeps younger", times: hourly(10), policy: retention.Policy{MaxAge: 5 * time.Hour}, want: 5},
		{name: "max age overrides keep last", times: hourly(10), policy: retention.Policy{KeepLast: 10, MaxAge: 2*time.Hour + time.Minute}, want: 3},
		{name: "max age never deletes the newest", times: []time.Time{now.Add(-100 * time.Hour), now.Add(-200 * time.Hour)},
			policy: retention.Policy{MaxAge: time.Hour}, newest: []time.Time{now.Add(-100 * time.Hour)}},
		{name: "hourly 5 of 48 hourly backups", times: hourly(48), policy: retention.Policy{Hours: 5}, newest: hourly(5)},
		{name: "hourly keeps newest per hour", times: []time.Time{now, now.Add(-10 * time.Minute), now.Add(-50 * time.Minute), now.Add(-70 * time.Minute)},
			policy: retention.Policy{Hours: 2}, newest: []time.Time{now, now.Add(-50 * time.Minute)}},
		{name: "daily 7 over 30 days of hourly backups", times: hourly(30 * 24), policy: retention.Policy{Days: 7}, want: 7},
		{name: "weekly 4 over 60 days", times: hourly(60 * 24), policy: retention.Policy{Weeks: 4}, want: 4},
		{name: "monthly 3 over 120 days", times: hourly(120 * 24), policy: retention.Policy{Months: 3}, want: 3},
		{name: "gfs 12 months over 400 days", times: hourly(400 * 24), policy: retention.GFS(12),
			// 24 hourly (back to the 21st, 13:30); days 20 to 16 (the 22nd's
			// and 21st's newest are hourly ones); the weeks of Nov 9, Nov 2
			// and Oct 26 (Nov 16's newest is now); Oct 2026 back to Dec 2025.
			want: 24 + 5 + 3 + 11},
		{name: "outage does not stretch daily rule", times: []time.Time{now.AddDate(0, 0, -20), now.AddDate(0, 0, -21), now.AddDate(0, 0, -22)},
			policy: retention.Policy{Days: 3}, newest: []time.Time{now.AddDate(0, 0, -20)}},
		{name: "negative keep", policy: retention.Policy{KeepLast: -1}, wantErr: true},
		{name: "keep within beyond max age", policy: retention.Policy{KeepWithin: 2 * time.Hour, MaxAge: time.Hour}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := retention.MakePlan("c", history(tc.times...), tc.policy, now, retention.PlanOptions{})
			if tc.wantErr {
				require.ErrorIs(t, err, retention.ErrInvalidPolicy)
				return
			}
			require.NoError(t, err)
			got := kept(t, plan)
			if tc.newest != nil {
				want := slices.Clone(tc.newest)
				slices.SortFunc(want, func(a, b time.Time) int { return a.Compare(b) })
				require.Equal(t, want, got)
				return
			}
			require.Len(t, got, tc.want)
		})
	}
}

func TestPlanCalendarInZone(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	// 23:30 UTC on the 21st is 00:30 on the 22nd in Berlin: a new day there.
	times := []time.Time{
		time.Date(2026, 11, 21, 22, 30, 0, 0, time.UTC), // 23:30 Berlin, 21st
		time.Date(2026, 11, 21, 23, 30, 0, 0, time.UTC), // 00:30 Berlin, 22nd
		time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC),  // 11:00 Berlin, 22nd
	}
	plan, err := retention.MakePlan("c", history(times...), retention.Policy{Days: 2, Location: berlin}, now, retention.PlanOptions{})
	require.NoError(t, err)
	require.Equal(t, []time.Time{times[0], times[2]}, kept(t, plan))
	plan, err = retention.MakePlan("c", history(times...), retention.Policy{Days: 2}, now, retention.PlanOptions{})
	require.NoError(t, err)
	require.Equal(t, []time.Time{times[1], times[2]}, kept(t, plan), "in UTC both early ones are on the 21st")
}

func TestPlanOrdersByManifestTime(t *testing.T) {
	entries := history(now.Add(-3*time.Hour), now.Add(-2*time.Hour), now.Add(-time.Hour))
	// Modification times say the opposite (a copy between buckets rewrote
	// them); only the manifests' times count.
	for i := range entries {
		entries[i].Created = now.Add(-time.Duration(i) * time.Minute)
	}
	plan, err := retention.MakePlan("c", entries, retention.KeepLast(1), now, retention.PlanOptions{})
	require.NoError(t, err)
	for _, d := range plan.Decisions {
		if d.Entry.Manifest.Created.Equal(now.Add(-time.Hour)) {
			require.Equal(t, retention.Keep, d.Action)
		} else {
			require.Equal(t, retention.Delete, d.Action)
		}
	}
}

func TestPlanNonBackups(t *testing.T) {
	entries := history(hourly(3)...)
	entries = append(entries,
		backup.Entry{Kind: backup.KindLegacy, Cluster: "c", ID: "snapshot.db", Key: "c/snapshot.db", Created: now.AddDate(-3, 0, 0)},
		backup.Entry{Kind: backup.KindForeign, Cluster: "c", ID: "x/y", Key: "c/x/y", Created: now.AddDate(-3, 0, 0)},
		backup.Entry{Kind: backup.KindInvalid, Cluster: "c", ID: "bad", Key: "c/bad.manifest.json", Created: now.AddDate(-3, 0, 0)},
		backup.Entry{Kind: backup.KindOrphan, Cluster: "c", ID: "old", Key: "c/old", Created: now.Add(-25 * time.Hour)},
		backup.Entry{Kind: backup.KindOrphan, Cluster: "c", ID: "young", Key: "c/young", Created: now.Add(-time.Hour)},
		backup.Entry{Kind: backup.KindBackup, Cluster: "other", ID: "o", Key: "other/o", Created: now.AddDate(-1, 0, 0),
			Manifest: &backup.Manifest{Cluster: "other", Created: now.AddDate(-1, 0, 0)}},
	)
	plan, err := retention.MakePlan("c", entries, retention.KeepLast(1), now, retention.PlanOptions{})
	require.NoError(t, err)
	actions := map[string]retention.Action{}
	for _, d := range plan.Decisions {
		actions[d.Entry.ID] = d.Action
	}
	require.Equal(t, retention.Keep, actions["snapshot.db"])
	require.Equal(t, retention.Keep, actions["x/y"])
	require.Equal(t, retention.Keep, actions["bad"])
	require.Equal(t, retention.Delete, actions["old"], "orphan past the grace")
	require.Equal(t, retention.Keep, actions["young"], "orphan within the grace")
	require.Equal(t, retention.Keep, actions["o"], "another cluster's entry")
	require.Len(t, plan.Deletes(), 3, "two old backups and one orphan")
}

// TestPlanInvariants runs random histories and policies at random times and
// checks what no policy may break.
func TestPlanInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 3000 {
		clock := now.Add(time.Duration(rng.Int64N(int64(400*24*time.Hour))) - 200*24*time.Hour)
		var entries []backup.Entry
		var times []time.Time
		for range rng.IntN(60) {
			times = append(times, now.Add(-time.Duration(rng.Int64N(int64(500*24*time.Hour)))))
		}
		entries = append(entries, history(times...)...)
		kinds := []backup.Kind{backup.KindLegacy, backup.KindForeign, backup.KindInvalid, backup.KindOrphan}
		for i := range rng.IntN(6) {
			entries = append(entries, backup.Entry{Kind: kinds[rng.IntN(len(kinds))], Cluster: "c", ID: fmt.Sprint("e", i),
				Key: fmt.Sprint("c/e", i), Created: now.Add(-time.Duration(rng.Int64N(int64(900 * 24 * time.Hour))))})
		}
		if rng.IntN(4) == 0 {
			entries = append(entries, backup.Entry{Kind: backup.KindBackup, Cluster: "c-b", ID: "foreign-cluster", Key: "c-b/x",
				Created: now.AddDate(-5, 0, 0), Manifest: &backup.Manifest{Cluster: "c-b", Created: now.AddDate(-5, 0, 0)}})
		}
		policy := retention.Policy{
			KeepLast: rng.IntN(4) * rng.IntN(10), Hours: rng.IntN(3) * rng.IntN(30), Days: rng.IntN(3) * rng.IntN(10),
			Weeks: rng.IntN(3) * rng.IntN(6), Months: rng.IntN(3) * rng.IntN(14),
		}
		if rng.IntN(3) == 0 {
			policy.MaxAge = time.Duration(rng.Int64N(int64(300 * 24 * time.Hour)))
		}
		if rng.IntN(3) == 0 {
			policy.KeepWithin = time.Duration(rng.Int64N(int64(policy.MaxAge + 1)))
			if policy.MaxAge == 0 {
				policy.KeepWithin = time.Duration(rng.Int64N(int64(30 * 24 * time.Hour)))
			}
		}
		plan, err := retention.MakePlan("c", entries, policy, clock, retention.PlanOptions{})
		require.NoError(t, err, "round %d policy %s", round, policy)
		require.Len(t, plan.Decisions, len(entries))

		var newest *backup.Entry
		for i := range entries {
			e := &entries[i]
			if e.Kind == backup.KindBackup && e.Cluster == "c" && (newest == nil || e.Manifest.Created.After(newest.Manifest.Created)) {
				newest = e
			}
		}
		for _, d := range plan.Decisions {
			require.NotEmpty(t, d.Reason)
			e := d.Entry
			if d.Action != retention.Delete {
				continue
			}
			ctx := fmt.Sprintf("round %d policy %s at %s: %s %s (%s)", round, policy, clock, e.Kind, e.ID, d.Reason)
			require.Equal(t, "c", e.Cluster, "deleted another cluster's entry: "+ctx)
			require.Contains(t, []backup.Kind{backup.KindBackup, backup.KindOrphan}, e.Kind, "deleted a protected kind: "+ctx)
			if e.Kind == backup.KindBackup {
				require.NotEqual(t, newest.ID, e.ID, "deleted the newest backup: "+ctx)
				require.False(t, e.Manifest.Created.After(clock), "deleted a backup from the future: "+ctx)
			}
			if e.Kind == backup.KindOrphan {
				require.GreaterOrEqual(t, clock.Sub(e.Created), retention.DefaultOrphanGrace, ctx)
			}
		}
		// Keep-last holds unless max-age removes the backup.
		if policy.KeepLast > 0 {
			var backups []backup.Entry
			for _, d := range plan.Decisions {
				if d.Entry.Kind == backup.KindBackup && d.Entry.Cluster == "c" {
					backups = append(backups, d.Entry)
				}
			}
			slices.SortFunc(backups, func(a, b backup.Entry) int { return b.Manifest.Created.Compare(a.Manifest.Created) })
			for rank, e := range backups[:min(policy.KeepLast, len(backups))] {
				for _, d := range plan.Decisions {
					if d.Entry.ID == e.ID && d.Action == retention.Delete {
						require.True(t, policy.MaxAge > 0 && clock.Sub(e.Manifest.Created) > policy.MaxAge,
							"round %d: keep-last rank %d deleted without max-age: %s", round, rank, d.Reason)
					}
				}
			}
		}
	}
}

func BenchmarkPlan100k(b *testing.B) {
	times := make([]time.Time, 100_000)
	for i := range times {
		times[i] = now.Add(-time.Duration(i) * 7 * time.Minute)
	}
	entries := history(times...)
	policy := retention.Policy{KeepLast: 20, Hours: 24, Days: 7, Weeks: 4, Months: 12, MaxAge: 365 * 24 * time.Hour}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := retention.MakePlan("c", entries, policy, now, retention.PlanOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
