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

// propEpoch is when the generated clusters started: revision 1.
var propEpoch = now.AddDate(0, 0, -20)

// revAt is the cluster's revision at t: one a minute.
func revAt(t time.Time) int64 { return int64(t.Sub(propEpoch)/time.Minute) + 1 }

// timeOf is when the cluster reached revision r.
func timeOf(r int64) time.Time { return propEpoch.Add(time.Duration(r-1) * time.Minute) }

type propConfig struct {
	name   string
	policy retention.Policy
	window time.Duration // zero: not continuous
}

// propHistory is a generated cluster folder: entries and the store's
// modification times of the manifests and objects.
type propHistory struct {
	configs []propConfig
	entries []backup.Entry
	mods    map[string]time.Time
	seq     int
}

func (h *propHistory) add(e backup.Entry, stored time.Time) {
	h.entries = append(h.entries, e)
	h.mods[e.Key] = stored
	if e.ManifestKey != "" {
		h.mods[e.ManifestKey] = stored
	}
}

func (h *propHistory) id(cluster, name string, t time.Time) string {
	h.seq++
	return backup.UniqueBackupID(backup.BackupID(cluster, name, t, true), fmt.Sprintf("%08x", h.seq))
}

// full adds a full backup of cfg taken at the true time at, dated by a
// writer whose clock is off by skew.
func (h *propHistory) full(cluster, cfg string, at time.Time, skew time.Duration, stored time.Time) backup.Entry {
	dated := at.Add(skew)
	id := h.id(cluster, cfg, dated)
	rev := revAt(at)
	key := cluster + "/" + backup.DataKey(id, dated, backup.Zstd, false)
	e := backup.Entry{Kind: backup.KindBackup, Cluster: cluster, ID: id, Created: dated, Key: key, ManifestKey: backup.ManifestKey(key),
		Manifest: &backup.Manifest{ID: id, Cluster: cluster, Name: cfg, Created: dated, Completed: dated.Add(time.Minute),
			Etcd: backup.EtcdInfo{Revision: backup.RevisionInfo{Low: rev, High: rev}}}}
	h.add(e, stored)
	return e
}

func (h *propHistory) segment(chain string, first, last int64) {
	at := timeOf(last).Add(time.Second)
	id := h.id("c", "delta", at)
	key := "c/" + backup.DataKey(id, at, backup.Zstd, false)
	h.add(backup.Entry{Kind: backup.KindDelta, Cluster: "c", ID: id, Created: at, Key: key, ManifestKey: backup.ManifestKey(key),
		Manifest: &backup.Manifest{ID: id, Cluster: "c", Name: "delta", Created: at, Kind: backup.ManifestKindDelta,
			FirstRevision: first, LastRevision: last, Chain: chain}}, at)
}

func randomPolicy(rng *rand.Rand) retention.Policy {
	switch rng.IntN(5) {
	case 0:
		return retention.KeepLast(1 + rng.IntN(5))
	case 1:
		return retention.Policy{Hours: rng.IntN(6), Days: 1 + rng.IntN(3)}
	case 2:
		return retention.Policy{MaxAge: time.Duration(1+rng.IntN(120)) * time.Hour}
	case 3:
		return retention.Policy{KeepLast: 1 + rng.IntN(3), MaxAge: time.Duration(1+rng.IntN(48)) * time.Hour}
	}
	return retention.Policy{}
}

// genHistory generates a folder: up to three configs of one cluster, some
// continuous, with misdated full backups (future, backdated), chains with
// gaps, and another cluster's, legacy, foreign, invalid and orphan
// objects; sometimes a copy between buckets restamped every store time.
func genHistory(rng *rand.Rand) *propHistory {
	h := &propHistory{mods: map[string]time.Time{}}
	windows := []time.Duration{30 * time.Minute, 90 * time.Minute, 6 * time.Hour, 48 * time.Hour}
	for k := range 1 + rng.IntN(3) {
		cfg := propConfig{name: fmt.Sprintf("cfg%d", k), policy: randomPolicy(rng)}
		if rng.IntN(10) < 6 {
			cfg.window = windows[rng.IntN(len(windows))]
		}
		h.configs = append(h.configs, cfg)
		var at []time.Time
		for range 1 + rng.IntN(6) {
			at = append(at, now.Add(-time.Duration(1+rng.IntN(10*24*60))*time.Minute))
		}
		slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
		for i, t := range at {
			var skew time.Duration
			switch rng.IntN(8) {
			case 0:
				skew = time.Duration(20+rng.IntN(365*24*60)) * time.Minute // future
			case 1:
				skew = -time.Duration(20+rng.IntN(5*24*60)) * time.Minute // backdated
			}
			f := h.full("c", cfg.name, t, skew, t.Add(time.Minute))
			if cfg.window == 0 {
				continue
			}
			end := revAt(now)
			if i+1 < len(at) {
				end = revAt(at[i+1])
			}
			for first := f.Manifest.Etcd.Revision.Low + 1; first <= end; {
				last := min(end, first+int64(rng.IntN(600)))
				if rng.IntN(12) > 0 { // else a gap: the follower's chain broke
					h.segment(f.ID, first, last)
				}
				first = last + 1
			}
		}
	}
	// What retention must never delete.
	other := h.full("c-x", "cfg0", now.Add(-5*24*time.Hour), 0, now.Add(-5*24*time.Hour))
	_ = other
	old := now.Add(-30 * 24 * time.Hour)
	h.add(backup.Entry{Kind: backup.KindLegacy, Cluster: "c", ID: "snapshot.db", Key: "c/snapshot.db", Created: old}, old)
	h.add(backup.Entry{Kind: backup.KindForeign, Cluster: "c", ID: "x/y", Key: "c/x/y", Created: old}, old)
	unreadable := "c/" + backup.DataKey(h.id("c", "cfg0", old), old, backup.Zstd, false)
	h.add(backup.Entry{Kind: backup.KindInvalid, Cluster: "c", ID: "bad", Key: backup.ManifestKey(unreadable), ManifestKey: backup.ManifestKey(unreadable), Created: old}, old)
	h.add(backup.Entry{Kind: backup.KindOrphan, Cluster: "c", ID: "claimed", Key: unreadable, Created: old}, old)
	if rng.IntN(10) == 0 {
		copied := now.Add(-time.Duration(rng.IntN(60)) * time.Minute)
		for k := range h.mods {
			h.mods[k] = copied
		}
	}
	return h
}

// continuousBut returns the names of the continuous configs other than name.
func (h *propHistory) continuousBut(name string) []string {
	var names []string
	for _, c := range h.configs {
		if c.window > 0 && c.name != name {
			names = append(names, c.name)
		}
	}
	return names
}

// configEntries returns the full backups of cfg and the segments of the
// chains they start.
func configEntries(entries []backup.Entry, cfg string) []backup.Entry {
	fulls := map[string]bool{}
	for _, e := range entries {
		if e.Cluster == "c" && e.Kind == backup.KindBackup && e.Manifest.Name == cfg {
			fulls[e.ID] = true
		}
	}
	var out []backup.Entry
	for _, e := range entries {
		if e.Cluster == "c" && (fulls[e.ID] || e.Kind == backup.KindDelta && fulls[e.Manifest.Chain]) {
			out = append(out, e)
		}
	}
	return out
}

// TestPruneProperties prunes random folders config by config, whatever
// the policies: the newest full backup of each config by revision
// survives, every revision of each continuous config's window that was
// restorable stays restorable, and nothing of another cluster, and no
// legacy, foreign, invalid or claimed object, is deleted.
func TestPruneProperties(t *testing.T) {
	for round := range 200 {
		rng := rand.New(rand.NewPCG(uint64(round), 35))
		h := genHistory(rng)
		before := slices.Clone(h.entries)
		left := slices.Clone(h.entries)
		for _, i := range rng.Perm(len(h.configs)) {
			cfg := h.configs[i]
			plan, err := retention.MakePlan("c", left, cfg.policy, now, retention.PlanOptions{Name: cfg.name, ModTimes: h.mods})
			require.NoError(t, err)
			if cfg.window > 0 {
				plan, err = retention.ChainPolicy{Window: cfg.window, Others: h.continuousBut(cfg.name)}.Apply(plan)
				require.NoError(t, err)
			}
			deleted := map[string]bool{}
			for _, d := range plan.Deletes() {
				e := d.Entry
				require.True(t, e.Cluster == "c" && (e.Kind == backup.KindBackup || e.Kind == backup.KindDelta || e.Kind == backup.KindOrphan && e.ID != "claimed"),
					"round %d: %s deleted %s %s (%s)", round, cfg.name, e.Kind, e.Key, d.Reason)
				if e.Manifest != nil && e.Kind == backup.KindBackup {
					require.Equal(t, cfg.name, e.Manifest.Name, "round %d: another config's full backup", round)
				}
				deleted[e.Key] = true
			}
			left = slices.DeleteFunc(left, func(e backup.Entry) bool { return deleted[e.Key] })
		}
		for _, cfg := range h.configs {
			was, is := configEntries(before, cfg.name), configEntries(left, cfg.name)
			var newest *backup.Entry
			for i, e := range was {
				if e.Kind == backup.KindBackup && (newest == nil || e.Manifest.Etcd.Revision.Low > newest.Manifest.Etcd.Revision.Low) {
					newest = &was[i]
				}
			}
			require.True(t, slices.ContainsFunc(is, func(e backup.Entry) bool { return e.Key == newest.Key }),
				"round %d: %s lost its newest backup by revision", round, cfg.name)
			if cfg.window == 0 {
				continue
			}
			from, to := revAt(now.Add(-cfg.window)), revAt(now)
			points := []int64{from, to}
			for _, e := range was {
				for _, r := range []int64{e.Manifest.Etcd.Revision.Low, e.Manifest.FirstRevision - 1, e.Manifest.FirstRevision, e.Manifest.LastRevision} {
					if r >= from && r <= to {
						points = append(points, r)
					}
				}
			}
			for range 20 {
				points = append(points, from+rng.Int64N(to-from+1))
			}
			for _, r := range points {
				if restorable(was, r) {
					require.True(t, restorable(is, r), "round %d: %s: revision %d of the %s window lost", round, cfg.name, r, cfg.window)
				}
			}
		}
	}
}
