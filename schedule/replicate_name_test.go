package schedule

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/retention"
)

// TestReplicationOfOneName runs two configs of one cluster to the same
// primary, each replicated to the same vault by its own job scoped to its
// backup name (as the Kubernetes controller's replicateTo does): each job
// copies only its config's backups and prunes only their copies, by its
// own retention, so neither deletes the other's copies nor copies back
// what the other pruned.
func TestReplicationOfOneName(t *testing.T) {
	noLeaks(t)
	dests := newMemDestinations(t, "primary", "vault")
	h := newHarness(t, utc("2026-01-01T00:30:00Z"), Config{})
	runner := dests.runner(&streamSnapshotter{}, h.clk.Now)
	cc := &countCopied{}
	runner.ReplicationObserver = cc
	h.s.runner = runner
	h.s.inventory = dests.inventory()
	for _, c := range []struct {
		name string
		keep int
	}{{"a", 1}, {"b", 3}} {
		require.NoError(t, h.s.Set(Job{ID: "ns/" + c.name, Schedule: "0 * * * *", Cluster: "prod-a", Name: c.name,
			Destinations: []string{"primary"}, Retention: retention.KeepLast(10)}))
		require.NoError(t, h.s.Set(Job{ID: "ns/" + c.name + "#replicate", Schedule: "30 * * * *", Cluster: "prod-a", Name: c.name,
			Destinations: []string{"vault"}, Retention: retention.KeepLast(c.keep),
			Replicate: &Replicate{From: "primary", Name: c.name}}))
	}
	h.start()
	for _, at := range []string{"2026-01-01T01:00:00Z", "2026-01-01T01:30:00Z", "2026-01-01T02:00:00Z",
		"2026-01-01T02:30:00Z", "2026-01-01T03:00:00Z", "2026-01-01T03:30:00Z",
		"2026-01-01T04:00:00Z", "2026-01-01T04:30:00Z"} {
		h.advanceTo(utc(at))
	}
	for _, id := range []string{"ns/a#replicate", "ns/b#replicate"} {
		st := h.status(id)
		require.NoError(t, st.LastError, id)
		require.NoError(t, st.LastPruneError, id)
	}
	require.NoError(t, h.stop())
	src := backupsOf(t, dests["primary"], "prod-a")
	byName := map[string]int{}
	for _, e := range backupsOf(t, dests["vault"], "prod-a") {
		byName[e.Manifest.Name]++
	}
	require.Equal(t, map[string]int{"a": 1, "b": 3}, byName, "copies on the vault by name")
	// Each backup is copied once at most: none is copied back after the
	// other job's prune deleted it.
	require.LessOrEqual(t, cc.n.Load(), int64(len(src)), "copies made of %d source backups", len(src))
}
