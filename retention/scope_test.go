package retention_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
)

// named sets the config name of entries, and their kind.
func named(entries []backup.Entry, name string, kind backup.Kind) []backup.Entry {
	for i := range entries {
		entries[i].Kind = kind
		entries[i].Manifest.Name = name
		entries[i].ID = entries[i].ID + "-" + name
	}
	return entries
}

func TestPlanScopes(t *testing.T) {
	hourly := named(history(hourly(6)...), "hourly", backup.KindBackup)
	daily := named(history(now.Add(-30*time.Minute), now.Add(-25*time.Hour)), "daily", backup.KindBackup)
	exports := named(history(now.Add(-10*time.Minute), now.Add(-3*time.Hour), now.Add(-5*time.Hour)), "export", backup.KindKeysJSON)
	entries := append(append(append([]backup.Entry{}, hourly...), daily...), exports...)

	count := func(p *retention.Plan, name string) (kept, deleted int) {
		for _, d := range p.Decisions {
			if d.Entry.Manifest.Name != name {
				continue
			}
			if d.Action == retention.Keep {
				kept++
			} else {
				deleted++
			}
		}
		return kept, deleted
	}
	for _, tc := range []struct {
		opts             retention.PlanOptions
		name             string
		kept, deleted    int
		otherNameDeleted bool
	}{
		{retention.PlanOptions{Name: "hourly"}, "hourly", 1, 5, false},
		{retention.PlanOptions{Name: "daily"}, "daily", 1, 1, false},
		{retention.PlanOptions{Name: "export", Kind: backup.KindKeysJSON}, "export", 1, 2, false},
		{retention.PlanOptions{Kind: backup.KindKeysJSON}, "export", 1, 2, false},
		{retention.PlanOptions{Name: "export"}, "export", 3, 0, false}, // snapshots counted: the exports are out of scope
	} {
		p, err := retention.MakePlan("c", entries, retention.KeepLast(1), now, tc.opts)
		require.NoError(t, err)
		k, d := count(p, tc.name)
		require.Equal(t, [2]int{tc.kept, tc.deleted}, [2]int{k, d}, "%+v", tc.opts)
		for _, dec := range p.Decisions {
			if dec.Action == retention.Delete {
				require.Equal(t, tc.name, dec.Entry.Manifest.Name, "%+v deletes only in its scope", tc.opts)
			}
		}
	}
	// Without a name, every snapshot of the cluster counts, the exports never.
	p, err := retention.MakePlan("c", entries, retention.KeepLast(2), now, retention.PlanOptions{})
	require.NoError(t, err)
	k, _ := count(p, "export")
	require.Equal(t, 3, k)
	require.Len(t, p.Deletes(), 6)

	_, err = retention.MakePlan("c", entries, retention.KeepLast(1), now, retention.PlanOptions{Kind: backup.KindDelta})
	require.ErrorIs(t, err, retention.ErrInvalidPolicy)
	_, err = retention.MakePlan("c", entries, retention.KeepLast(1), now, retention.PlanOptions{Name: "Bad"})
	require.ErrorIs(t, err, backup.ErrInvalidName)
}

// A keys zip job's retention and a keys-json one's of the same name and
// cluster never count, nor delete, each other's backups or the snapshots.
func TestPlanCountsLogicalKindsApart(t *testing.T) {
	snaps := named(history(now.Add(-1*time.Hour), now.Add(-4*time.Hour)), "job", backup.KindBackup)
	jsons := named(history(now.Add(-2*time.Hour), now.Add(-5*time.Hour)), "job", backup.KindKeysJSON)
	zips := named(history(now.Add(-3*time.Hour), now.Add(-6*time.Hour), now.Add(-7*time.Hour)), "job", backup.KindKeys)
	for i := range jsons {
		jsons[i].ID += "-json"
	}
	for i := range zips {
		zips[i].ID += "-zip"
	}
	entries := append(append(append([]backup.Entry{}, snaps...), jsons...), zips...)
	for _, kind := range []backup.Kind{backup.KindKeys, backup.KindKeysJSON, backup.KindBackup} {
		p, err := retention.MakePlan("c", entries, retention.KeepLast(1), now, retention.PlanOptions{Name: "job", Kind: kind})
		require.NoError(t, err)
		deleted := map[backup.Kind]int{}
		for _, d := range p.Deletes() {
			deleted[d.Entry.Kind]++
		}
		want := map[backup.Kind]int{backup.KindKeys: 2, backup.KindKeysJSON: 1, backup.KindBackup: 1}[kind]
		require.Equal(t, map[backup.Kind]int{kind: want}, deleted, "a %s policy", kind)
	}
}
