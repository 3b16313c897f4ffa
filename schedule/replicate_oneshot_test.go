package schedule

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A one-shot replication job (a migration) to a target that already holds
// a backup of the cluster (it was added to the backup job's destinations
// first) runs: only its own copies, not the backups other jobs wrote
// there, tell that it ran.
func TestOneShotReplicationRunsOnHeldTarget(t *testing.T) {
	noLeaks(t)
	dests := newMemDestinations(t, "primary", "vault")
	start := utc("2026-01-01T00:30:00Z")
	h := newHarness(t, start, Config{})
	runner := dests.runner(&streamSnapshotter{}, h.clk.Now)
	h.s.runner = runner
	h.s.inventory = dests.inventory()
	require.NoError(t, h.s.Set(Job{ID: "ns/backup", Schedule: "0 * * * *", Cluster: "prod-a", Name: "hourly",
		Destinations: []string{"primary"}}))
	h.start()
	for _, at := range []string{"2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z", "2026-01-01T03:00:00Z"} {
		h.advanceTo(utc(at))
	}
	// The backup job gains vault as a second destination.
	require.NoError(t, h.s.Set(Job{ID: "ns/backup", Schedule: "0 * * * *", Cluster: "prod-a", Name: "hourly",
		Destinations: []string{"primary", "vault"}}))
	h.advanceTo(utc("2026-01-01T04:00:00Z"))
	// A one-shot copy of the history.
	require.NoError(t, h.s.Set(Job{ID: "ns/migrate", Cluster: "prod-a", Name: "migrate",
		Destinations: []string{"vault"}, Replicate: &Replicate{From: "primary"}}))
	h.advanceTo(utc("2026-01-01T04:10:00Z"))
	h.advanceTo(utc("2026-01-01T04:20:00Z"))
	require.NoError(t, h.stop())
	src, dst := backupsOf(t, dests["primary"], "prod-a"), backupsOf(t, dests["vault"], "prod-a")
	t.Logf("primary %d backups, vault %d", len(src), len(dst))
	if len(dst) < len(src) {
		t.Errorf("the one-shot replication job never copied the history")
	}
}
