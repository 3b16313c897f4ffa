package schedule

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/schedule/scheduletest"
)

// TestContinuousJobCompacts: a continuous job with a compaction interval
// compacts its chain, on the scheduler's clock and under its lock, into a
// synthetic full backup of the job's name on every destination; the
// follower goes on, and a next interval with nothing new to compact
// stores nothing.
func TestContinuousJobCompacts(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := newEtcdClient(t, srv)
	defer cli.Close()
	dests := newMemDestinations(t, "a", "b")
	clk := scheduletest.NewClock(utc("2026-01-01T00:00:00Z"))
	s, err := New(Config{Runner: etcdRunner(t, srv, dests), Lock: &EtcdLock{Client: cli, Prefix: "/locks/"}, Clock: clk, Logger: testLogger(t)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()

	j := continuousJob()
	j.Continuous.CompactInterval = time.Minute
	require.NoError(t, s.Set(j))
	eventually(t, func() bool { st, _ := s.Get(j.ID); return st.Following }, "the job follows etcd")
	rev := put(t, cli, 40)
	waitCommitted(t, dests, rev)
	clk.Advance(time.Minute)
	eventually(t, func() bool { st, _ := s.Get(j.ID); return st.Compactions == 1 }, "the chain was compacted")
	st, _ := s.Get(j.ID)
	require.NoError(t, st.CompactError)
	for _, name := range []string{"a", "b"} {
		var synthetic []*backup.Manifest
		for _, e := range backupsOf(t, dests[name], "prod-a") {
			if e.Manifest.IsSynthetic() {
				synthetic = append(synthetic, e.Manifest)
			}
		}
		require.Len(t, synthetic, 1, "destination %s", name)
		assert.Equal(t, "hourly", synthetic[0].Name)
		assert.GreaterOrEqual(t, synthetic[0].Etcd.Revision.Low, rev)
	}
	assert.True(t, st.Following, "the follower goes on")

	cancel()
	require.NoError(t, <-done)
}

// followOnly is a ContinuousRunner without Compact.
type followOnly struct{ RunnerFuncs }

func (followOnly) Follow(ctx context.Context, _ Job, started func()) error {
	started()
	<-ctx.Done()
	return nil
}

// TestCompactIntervalNeedsACompactingRunner: Set refuses a compaction
// interval the runner cannot honour, and one under a minute.
func TestCompactIntervalNeedsACompactingRunner(t *testing.T) {
	s, err := New(Config{Runner: followOnly{}})
	require.NoError(t, err)
	j := continuousJob()
	require.NoError(t, s.Set(j))
	j.Continuous.CompactInterval = time.Hour
	var je *JobError
	require.ErrorAs(t, s.Set(j), &je)
	assert.Contains(t, je.Error(), "CompactingRunner")
	j.Continuous.CompactInterval = time.Second
	require.ErrorContains(t, j.Validate(), "compaction interval")
}
