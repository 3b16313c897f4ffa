package destination_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/etcdbackup/etcdbackup/destination"
)

// Run checks and syncs every destination at its interval, follows
// destinations as they come and go, reports transitions to observers and
// the gauge, and leaves no goroutine behind.
func TestRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx := testCtx(t)
	const interval = 20 * time.Millisecond
	dir := filepath.Join(t.TempDir(), "local")
	obs := &events{}
	r, err := destination.NewRegistry(destination.Options{Observer: obs, CheckInterval: interval, PollInterval: interval})
	require.NoError(t, err)
	defer r.Close()
	eu, err := r.Add(ctx, mem("eu", "mem://eu"))
	require.NoError(t, err)
	_, err = r.Add(ctx, destination.Spec{Name: "local", URL: "file://" + dir})
	require.NoError(t, err)

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()

	require.Eventually(t, func() bool { return eu.Status().Available() }, waitFor, 5*time.Millisecond)
	local, err := r.Get("local")
	require.NoError(t, err)
	// Each destination is checked on its own: eu's answer says nothing of
	// local's first check.
	require.Eventually(t, func() bool { return local.Status().State != destination.StateUnknown }, waitFor, 5*time.Millisecond)
	assert.Equal(t, destination.ReasonMissingBucket, local.Status().Reason)
	require.Eventually(t, func() bool { return local.Status().ConsecutiveFailures >= 3 }, waitFor, 5*time.Millisecond,
		"checked again at every interval")
	require.ErrorContains(t, r.Run(ctx), "already running")

	// The directory appears: the next check opens it and finds it.
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.Eventually(t, func() bool { return local.Status().Available() }, waitFor, 5*time.Millisecond)
	// The observer hears of a change after the status shows it.
	require.Eventually(t, func() bool { return len(obs.of(destination.StatusChanged, "local")) >= 2 }, waitFor, 5*time.Millisecond)
	changes := obs.of(destination.StatusChanged, "local")
	require.Len(t, changes, 2, "unknown -> unavailable -> available")
	assert.Equal(t, destination.ReasonMissingBucket, changes[0].Status.Reason)
	assert.Equal(t, destination.StateUnavailable, changes[1].Previous.State)
	assert.True(t, changes[1].Status.Available())

	// A backup shows in the inventory within a poll.
	res := runBackup(t, ctx, "prod-a", "nightly", 1, eu.Target())
	require.Eventually(t, func() bool {
		for _, e := range r.Entries("prod-a") {
			if e.ID == res.ID {
				return true
			}
		}
		return false
	}, waitFor, 5*time.Millisecond)

	// A destination added while running is checked at once.
	us, err := r.Add(ctx, destination.Spec{Name: "us", URL: "mem://us", CheckInterval: time.Hour, PollInterval: time.Hour})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return us.Status().Available() }, waitFor, 5*time.Millisecond)

	metrics := `
# HELP etcdbackup_destination_available Whether the destination's last availability check succeeded (1) or failed (0).
# TYPE etcdbackup_destination_available gauge
etcdbackup_destination_available{destination="eu"} 1
etcdbackup_destination_available{destination="local"} 1
etcdbackup_destination_available{destination="us"} 1
`
	require.NoError(t, testutil.CollectAndCompare(r.Collector(), strings.NewReader(metrics), destination.MetricAvailable))
	require.Eventually(t, func() bool {
		return testutil.CollectAndCompare(r.Collector(), strings.NewReader(`
# HELP etcdbackup_destination_inventory_entries Objects found on the destination by its last inventory sync, by kind.
# TYPE etcdbackup_destination_inventory_entries gauge
etcdbackup_destination_inventory_entries{destination="eu",kind="backup"} 1
etcdbackup_destination_inventory_entries{destination="eu",kind="delta"} 0
etcdbackup_destination_inventory_entries{destination="eu",kind="foreign"} 0
etcdbackup_destination_inventory_entries{destination="eu",kind="invalid"} 0
etcdbackup_destination_inventory_entries{destination="eu",kind="keys"} 0
etcdbackup_destination_inventory_entries{destination="eu",kind="keys-json"} 0
etcdbackup_destination_inventory_entries{destination="eu",kind="legacy"} 0
etcdbackup_destination_inventory_entries{destination="eu",kind="orphan"} 0
etcdbackup_destination_inventory_entries{destination="local",kind="backup"} 0
etcdbackup_destination_inventory_entries{destination="local",kind="delta"} 0
etcdbackup_destination_inventory_entries{destination="local",kind="foreign"} 0
etcdbackup_destination_inventory_entries{destination="local",kind="invalid"} 0
etcdbackup_destination_inventory_entries{destination="local",kind="keys"} 0
etcdbackup_destination_inventory_entries{destination="local",kind="keys-json"} 0
etcdbackup_destination_inventory_entries{destination="local",kind="legacy"} 0
etcdbackup_destination_inventory_entries{destination="local",kind="orphan"} 0
etcdbackup_destination_inventory_entries{destination="us",kind="backup"} 0
etcdbackup_destination_inventory_entries{destination="us",kind="delta"} 0
etcdbackup_destination_inventory_entries{destination="us",kind="foreign"} 0
etcdbackup_destination_inventory_entries{destination="us",kind="invalid"} 0
etcdbackup_destination_inventory_entries{destination="us",kind="keys"} 0
etcdbackup_destination_inventory_entries{destination="us",kind="keys-json"} 0
etcdbackup_destination_inventory_entries{destination="us",kind="legacy"} 0
etcdbackup_destination_inventory_entries{destination="us",kind="orphan"} 0
`), destination.MetricInventoryEntries) == nil
	}, waitFor, 5*time.Millisecond)

	// A removed destination's series go with it.
	require.NoError(t, r.Remove("local"))
	assert.Equal(t, 2, testutil.CollectAndCount(r.Collector(), destination.MetricAvailable))

	stop()
	require.NoError(t, <-done)
	assert.Empty(t, r.Entries("nope"))
}

// Closing the registry ends Run.
func TestRunEndsOnClose(t *testing.T) {
	defer goleak.VerifyNone(t)
	r, err := destination.NewRegistry(destination.Options{CheckInterval: time.Hour})
	require.NoError(t, err)
	_, err = r.Add(context.Background(), mem("eu", "mem://eu"))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	d, _ := r.Get("eu")
	require.Eventually(t, func() bool { return d.Status().Available() }, waitFor, 5*time.Millisecond)
	require.NoError(t, r.Close())
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(waitFor):
		t.Fatal("Run did not return after Close")
	}
	require.ErrorIs(t, r.Run(context.Background()), destination.ErrClosed)
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []destination.Options{
		{CheckInterval: -1}, {PollInterval: -1}, {CheckTimeout: -1}, {PartSize: 1}, {PartsInFlight: -1},
	} {
		_, err := destination.NewRegistry(o)
		require.Error(t, err, "%+v", o)
	}
}
