package schedule

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/retention"
)

// Two replication jobs of one cluster onto one vault whose scopes overlap
// (no Replicate.Name, or the same one; here from two sources) would each
// prune every copy there, copies recording no source: each job's retention
// would delete the other's copies. The second is refused; jobs scoped to
// different names, to other targets or other clusters, and one-shot jobs
// (which prune nothing) among themselves are not.
func TestOverlappingReplicationsRefused(t *testing.T) {
	noLeaks(t)
	dests := newMemDestinations(t, "east", "west", "vault", "vault2")
	h := newHarness(t, utc("2026-01-01T00:30:00Z"), Config{})
	h.s.runner = dests.runner(&streamSnapshotter{}, h.clk.Now)
	h.s.inventory = dests.inventory()
	job := func(id, from, name string, to ...string) Job {
		return Job{ID: id, Schedule: "30 * * * *", Cluster: "prod-a", Name: id, Destinations: to,
			Retention: retention.KeepLast(2), Replicate: &Replicate{From: from, Name: name}}
	}
	require.NoError(t, h.s.Set(job("east", "east", "", "vault")))
	for _, j := range []Job{
		job("west", "west", "", "vault2", "vault"),
		job("west-a", "west", "a", "vault"),
		job("east-again", "east", "", "vault"),
	} {
		require.ErrorIs(t, h.s.Set(j), ErrInvalidJob, j.ID)
	}
	require.NoError(t, h.s.Set(job("west", "west", "", "vault2")))
	require.NoError(t, h.s.Set(job("east", "east", "", "vault")), "a job set again is no overlap of its own")
	other := job("other-cluster", "west", "", "vault")
	other.Cluster = "prod-b"
	require.NoError(t, h.s.Set(other), "another cluster")
	require.ErrorIs(t, h.s.Set(job("east", "east", "", "vault2")), ErrInvalidJob, "a job moved onto another's target")
	named := job("a", "east", "a", "vault3")
	require.NoError(t, h.s.Set(named))
	require.NoError(t, h.s.Set(job("b", "west", "b", "vault3")), "two names on one target")
	once := job("once", "east", "", "vault4")
	once.Schedule = ""
	require.NoError(t, h.s.Set(once))
	once.ID = "once-more"
	require.NoError(t, h.s.Set(once), "two one-shot copies: neither prunes")
	require.ErrorIs(t, h.s.Set(job("weekly", "west", "", "vault4")), ErrInvalidJob, "a scheduled job prunes a one-shot job's copies")
}
