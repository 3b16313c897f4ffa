package schedule

import (
	"context"
	"errors"
	"iter"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/replicate"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
)

// deadBucket is a bucket whose listings fail once it is dead.
type deadBucket struct {
	storage.Bucket
	dead bool
}

func (b *deadBucket) List(ctx context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error] {
	if b.dead {
		return func(yield func(storage.ObjectInfo, error) bool) {
			yield(storage.ObjectInfo{}, errors.New("source unreachable"))
		}
	}
	return b.Bucket.List(ctx, prefix)
}

// TestReplicationMetricsOfADeadSource: a replication run whose source
// cannot be listed counts as a failure, and the lag grows from the start
// of the last copy that left the target in step; before, the metrics
// kept saying the target was in step.
func TestReplicationMetricsOfADeadSource(t *testing.T) {
	dests := newMemDestinations(t, "primary", "vault")
	src := &deadBucket{Bucket: dests["primary"]}
	dests["primary"] = src
	storeKeysJSON(t, src, utc("2026-01-01T00:00:00Z"), 10)
	now := utc("2026-01-01T01:00:00Z")
	runner := dests.runner(&streamSnapshotter{}, func() time.Time { return now })
	metrics := replicate.NewMetrics()
	runner.ReplicationMetrics = metrics
	job := Job{ID: "ns/replicate", Schedule: "@hourly", Cluster: "prod-a", Name: "vault", Destinations: []string{"vault"},
		Retention: retention.KeepLast(2), Replicate: &Replicate{From: "primary"}}
	require.NoError(t, runner.replicate(t.Context(), job))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics)
	require.Zero(t, gaugeValue(t, reg, replicate.MetricLag))

	src.dead = true
	now = now.Add(30 * time.Minute)
	require.Error(t, runner.replicate(t.Context(), job))
	assert.Equal(t, 1.0, gaugeValue(t, reg, replicate.MetricFailed), "failures")
	assert.Equal(t, 1800.0, gaugeValue(t, reg, replicate.MetricLag), "lag")
	now = now.Add(30 * time.Minute)
	require.Error(t, runner.replicate(t.Context(), job))
	assert.Equal(t, 2.0, gaugeValue(t, reg, replicate.MetricFailed), "failures")
	assert.Equal(t, 3600.0, gaugeValue(t, reg, replicate.MetricLag), "lag")
}

// TestReplicationMetricsOfACancelledRun: a run cancelled (the scheduler
// stopping) before it could open its source or its target is no failure
// of replication: the failures counter and the lag stay as they were. A
// run that ran out of time is one.
func TestReplicationMetricsOfACancelledRun(t *testing.T) {
	dests := newMemDestinations(t, "primary", "vault")
	storeKeysJSON(t, dests["primary"], utc("2026-01-01T00:00:00Z"), 10)
	now := utc("2026-01-01T01:00:00Z")
	runner := dests.runner(&streamSnapshotter{}, func() time.Time { return now })
	metrics := replicate.NewMetrics()
	runner.ReplicationMetrics = metrics
	job := Job{ID: "ns/replicate", Schedule: "@hourly", Cluster: "prod-a", Name: "vault", Destinations: []string{"vault"},
		Retention: retention.KeepLast(2), Replicate: &Replicate{From: "primary"}}
	require.NoError(t, runner.replicate(t.Context(), job))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	store, uploader := runner.Store, runner.Uploader
	runner.Store = func(ctx context.Context, name string) (retention.Store, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return store(ctx, name)
	}
	now = now.Add(30 * time.Minute)
	require.Error(t, runner.replicate(ctx, job))
	runner.Store = store
	runner.Uploader = func(ctx context.Context, name string) (backup.Uploader, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return uploader(ctx, name)
	}
	require.Error(t, runner.replicate(ctx, job))
	assert.Zero(t, gaugeValue(t, reg, replicate.MetricFailed), "failures")
	assert.Zero(t, gaugeValue(t, reg, replicate.MetricLag), "lag")
	// A run out of time (a source that hangs) fails.
	ctx, cancelRun := context.WithCancelCause(t.Context())
	cancelRun(ErrRunTimeout)
	require.Error(t, runner.replicate(ctx, job))
	assert.Equal(t, 1.0, gaugeValue(t, reg, replicate.MetricFailed), "failures")
	assert.Equal(t, 1800.0, gaugeValue(t, reg, replicate.MetricLag), "lag")
}
