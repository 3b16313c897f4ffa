package schedule

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/replicate"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/storage"
)

// completedTimes lists its bucket with every object of a backup of cluster dated
// by the backup's completion (completedStore), as a store written as
// each backup completed.
type completedTimes struct {
	storage.Bucket
	times map[string]time.Time // backup ID -> modification time
}

func completedStore(t *testing.T, b storage.Bucket, cluster string) *completedTimes {
	times := map[string]time.Time{}
	entries, err := backup.ListBackups(t.Context(), b, cluster)
	require.NoError(t, err)
	for _, e := range entries {
		if e.Manifest != nil {
			times[e.ID] = e.Manifest.Completed
		}
	}
	return &completedTimes{Bucket: b, times: times}
}

func (b *completedTimes) List(ctx context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error] {
	return func(yield func(storage.ObjectInfo, error) bool) {
		for info, err := range b.Bucket.List(ctx, prefix) {
			for id, tm := range b.times {
				if strings.Contains(info.Key, id) {
					info.ModTime = tm
				}
			}
			if !yield(info, err) {
				return
			}
		}
	}
}

// TestReplicationKeepsALiveChainAndPrunesAnEndedOne: a replication job
// with KeepLast(2) and no point-in-time window copies a follower's live
// chain whose full backup fell out of the keep-last, and its prune keeps
// it, while an ended chain older than the full backups kept is deleted
// whole from the target.
func TestReplicationKeepsALiveChainAndPrunesAnEndedOne(t *testing.T) {
	dests := newMemDestinations(t, "primary", "vault")
	src := dests["primary"]
	start := utc("2026-01-01T00:00:00Z")
	full := func(at time.Duration, rev int64) *backup.Manifest {
		return storeBackup(t, src, backup.Manifest{Name: "full", Created: start.Add(at), Etcd: backup.EtcdInfo{Revision: backup.RevisionInfo{Low: rev, High: rev}}})
	}
	seg := func(chain *backup.Manifest, at time.Duration, first, last int64) *backup.Manifest {
		return storeBackup(t, src, backup.Manifest{Format: backup.DeltaManifestFormat, Kind: backup.ManifestKindDelta, Name: fmt.Sprintf("delta-%d", first),
			Created: start.Add(at), FirstRevision: first, LastRevision: last, Chain: chain.ID})
	}
	ended := full(0, 10)
	seg(ended, time.Minute, 11, 20)
	live := full(time.Hour, 30)
	seg(live, 61*time.Minute, 31, 40)
	full(2*time.Hour, 50)
	full(3*time.Hour, 60)
	newest := seg(live, 3*time.Hour+time.Minute, 41, 70)

	now := start.Add(4 * time.Hour)
	runner := dests.runner(&streamSnapshotter{}, func() time.Time { return now })
	job := Job{ID: "ns/replicate", Schedule: "@hourly", Cluster: "prod-a", Name: "vault", Destinations: []string{"vault"},
		Retention: retention.KeepLast(2), Replicate: &Replicate{From: "primary"}}
	// The ended chain on the target, as an earlier run copied it.
	c := &replicate.Copier{Source: src, SourceName: "primary", Target: replicate.Target{Name: "vault", Bucket: dests["vault"]}}
	_, err := c.Copy(t.Context(), "prod-a", replicate.Selection{Chains: []string{ended.ID}})
	require.NoError(t, err)

	require.NoError(t, runner.replicate(t.Context(), job))
	// The target's store wrote each copy as its backup completed (a job
	// keeping up): the ended chain longer ago than the chain rule's grace.
	vault := completedStore(t, dests["vault"], "prod-a")
	runner.Store = func(context.Context, string) (retention.Store, error) { return vault, nil }
	require.NoError(t, runner.Prune(t.Context(), job))
	entries, err := backup.ListBackups(t.Context(), dests["vault"], "prod-a")
	require.NoError(t, err)
	got := map[string]bool{}
	for _, e := range entries {
		got[e.ID] = true
	}
	require.True(t, got[live.ID] && got[newest.ID], "the live chain on the target: %v", got)
	require.False(t, got[ended.ID], "the ended chain's full backup on the target: %v", got)
	require.Len(t, entries, 5, "the live chain's full backup and 2 segments, the 2 full backups kept: %v", got)
}
