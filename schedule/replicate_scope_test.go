package schedule

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/replicate"
	"github.com/etcdbackup/etcdbackup/retention"
)

type countCopied struct{ n atomic.Int64 }

func (c *countCopied) Observe(e replicate.Event) {
	if e.Kind == replicate.Done && e.Item != nil && e.Item.Outcome == replicate.Copied {
		c.n.Add(1)
	}
}

// A replication job with a retention and no window (the default) prunes on
// the target what the source still lists, and each run copies it again; its
// prune also deletes the backups another job writes to the target directly.
func TestReplicationPrunesOnlyItsCopiesWithoutChurn(t *testing.T) {
	noLeaks(t)
	dests := newMemDestinations(t, "primary", "vault")
	start := utc("2026-01-01T00:30:00Z")
	h := newHarness(t, start, Config{})
	runner := dests.runner(&streamSnapshotter{}, h.clk.Now)
	cc := &countCopied{}
	runner.ReplicationObserver = cc
	h.s.runner = runner
	h.s.inventory = dests.inventory()
	require.NoError(t, h.s.Set(Job{ID: "ns/backup", Schedule: "0 * * * *", Cluster: "prod-a", Name: "hourly",
		Destinations: []string{"primary"}}))
	// The vault's own job, keeping 10 of its own.
	require.NoError(t, h.s.Set(Job{ID: "ns/vaultdaily", Schedule: "15 * * * *", Cluster: "prod-a", Name: "vaultown",
		Destinations: []string{"vault"}, Retention: retention.KeepLast(10)}))
	require.NoError(t, h.s.Set(Job{ID: "ns/replicate", Schedule: "30 * * * *", Cluster: "prod-a", Name: "vault",
		Destinations: []string{"vault"}, Retention: retention.KeepLast(2),
		Replicate: &Replicate{From: "primary"}}))
	h.start()
	for _, at := range []string{"2026-01-01T01:00:00Z", "2026-01-01T01:15:00Z", "2026-01-01T01:30:00Z",
		"2026-01-01T02:00:00Z", "2026-01-01T02:15:00Z", "2026-01-01T02:30:00Z",
		"2026-01-01T03:00:00Z", "2026-01-01T03:15:00Z", "2026-01-01T03:30:00Z",
		"2026-01-01T04:00:00Z", "2026-01-01T04:15:00Z", "2026-01-01T04:30:00Z"} {
		h.advanceTo(utc(at))
	}
	require.NoError(t, h.stop())
	src, dst := backupsOf(t, dests["primary"], "prod-a"), backupsOf(t, dests["vault"], "prod-a")
	own := 0
	for _, e := range dst {
		if e.Manifest.Name == "vaultown" {
			own++
		}
		t.Logf("vault: %s (%s)", e.ID, e.Manifest.Name)
	}
	t.Logf("source backups %d, copies made over 4 runs %d, vault's own job's backups left %d", len(src), cc.n.Load(), own)
	if own < 4 {
		t.Errorf("the replication job's retention pruned backups the vault's own job wrote (keeps 10)")
	}
	if cc.n.Load() > int64(len(src)) {
		t.Errorf("%d copies for %d source backups: each run re-copies what the last prune deleted", cc.n.Load(), len(src))
	}
}
