package schedule

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/schedule/scheduletest"
	"github.com/etcdbackup/etcdbackup/storage"
)

// chainOf returns a cluster's delta segments on b, ordered by revision,
// after checking that they form one contiguous chain from its full backup:
// no gap, and no double except a segment stored again. A follower stopped
// while a segment's store was under way has it on some destinations only;
// the segment is stored again from its first revision (by the final
// commit, or the next follower resuming after the destination that lacks
// it), and the destinations that had it then hold an overlap, which
// restore tolerates. Two followers at once would overlap anywhere.
func chainOf(t *testing.T, b storage.Bucket, cluster string) (full *backup.Manifest, segments []*backup.Manifest) {
	t.Helper()
	entries, err := backup.ListBackups(t.Context(), b, cluster)
	require.NoError(t, err)
	fulls := map[string]*backup.Manifest{}
	for _, e := range entries {
		switch e.Kind {
		case backup.KindBackup:
			fulls[e.ID] = e.Manifest
		case backup.KindDelta:
			segments = append(segments, e.Manifest)
		}
	}
	require.NotEmpty(t, segments, "no segment")
	slices.SortFunc(segments, func(a, b *backup.Manifest) int { return int(a.FirstRevision - b.FirstRevision) })
	full = fulls[segments[0].Chain]
	require.NotNil(t, full, "the chain's full backup %s", segments[0].Chain)
	next := full.Etcd.Revision.Low + 1
	starts := map[int64]bool{}
	for _, s := range segments {
		require.Equal(t, full.ID, s.Chain, "one chain")
		if s.FirstRevision != next {
			require.True(t, s.FirstRevision < next && starts[s.FirstRevision],
				"segment %s (%d..%d) follows the one before (next %d): no gap, no double but a segment stored again",
				s.ID, s.FirstRevision, s.LastRevision, next)
		}
		starts[s.FirstRevision] = true
		next = max(next, s.LastRevision+1)
	}
	return full, segments
}

// lastRevision is the newest revision a cluster's segments on b hold, 0
// when there is none.
func lastRevision(t *testing.T, b storage.Bucket, cluster string) int64 {
	entries, err := backup.ListBackups(t.Context(), b, cluster)
	require.NoError(t, err)
	var last int64
	for _, e := range entries {
		if e.Kind == backup.KindDelta {
			last = max(last, e.Manifest.LastRevision)
		}
	}
	return last
}

func continuousJob() Job {
	return Job{ID: "ns/prod-a", Schedule: "@every 1h", Cluster: "prod-a", Name: "hourly", Destinations: []string{"a", "b"},
		Retention: retention.KeepLast(3), Continuous: &Continuous{Window: time.Hour, FlushInterval: 50 * time.Millisecond}}
}

func etcdRunner(t *testing.T, srv *etcdtest.Server, dests memDestinations) *PipelineRunner {
	t.Helper()
	snap, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: srv.Endpoints()})
	require.NoError(t, err)
	return dests.runner(snap, nil)
}

func put(t *testing.T, cli *clientv3.Client, n int) int64 {
	t.Helper()
	var rev int64
	for i := range n {
		resp, err := cli.Put(t.Context(), fmt.Sprintf("/k/%d", i%7), fmt.Sprint(i))
		require.NoError(t, err)
		rev = resp.Header.Revision
	}
	return rev
}

// waitCommitted waits until every destination holds segments up to rev.
func waitCommitted(t *testing.T, dests memDestinations, rev int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, name := range []string{"a", "b"} {
		for lastRevision(t, dests[name], "prod-a") < rev {
			require.True(t, time.Now().Before(deadline), "destination %s never held revision %d", name, rev)
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestContinuousJob: a continuous job's follower starts with the
// scheduler (taking the first full backup, since there is none), writes
// segments to every destination, stops when the job is removed, and
// resumes the same chain when the job is set again.
func TestContinuousJob(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := newEtcdClient(t, srv)
	defer cli.Close()
	dests := newMemDestinations(t, "a", "b")
	s, err := New(Config{Runner: etcdRunner(t, srv, dests), Lock: &EtcdLock{Client: cli, Prefix: "/locks/"}, Logger: testLogger(t)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()

	j := continuousJob()
	require.NoError(t, s.Set(j))
	eventually(t, func() bool { st, _ := s.Get(j.ID); return st.Following }, "the job follows etcd")
	waitCommitted(t, dests, put(t, cli, 40))
	fullA, segsA := chainOf(t, dests["a"], "prod-a")
	fullB, _ := chainOf(t, dests["b"], "prod-a")
	assert.Equal(t, fullA.ID, fullB.ID, "one full backup serves both destinations")
	assert.Equal(t, "hourly", fullA.Name, "the chain starts from a backup of the job's name")

	// Remove returns once the follower has returned (its final commit
	// done): from then on nothing writes, so the revisions put next are
	// stored only when the job is set again.
	require.NoError(t, s.Remove(t.Context(), j.ID))
	stopped := lastRevision(t, dests["a"], "prod-a")
	rev := put(t, cli, 10)
	assert.Less(t, stopped, rev)
	assert.Equal(t, stopped, lastRevision(t, dests["a"], "prod-a"), "nothing is written once the job is removed")

	require.NoError(t, s.Set(j))
	waitCommitted(t, dests, rev)
	full, segs := chainOf(t, dests["a"], "prod-a")
	assert.Equal(t, fullA.ID, full.ID, "the chain resumes: no new full backup")
	assert.Greater(t, len(segs), len(segsA))
	st, _ := s.Get(j.ID)
	assert.NoError(t, st.FollowError)
	assert.Zero(t, st.FollowRestarts)

	cancel()
	require.NoError(t, <-done)
	st, _ = s.Get(j.ID)
	assert.False(t, st.Following, "no follower once the scheduler stopped")
}

// TestContinuousJobOneReplica: of two replicas with the same continuous
// job on one etcd lock, one follows; when it stops, the other takes over
// the same chain without a gap or a double.
func TestContinuousJobOneReplica(t *testing.T) {
	defer func(d time.Duration) { followLockRetry = d }(followLockRetry)
	followLockRetry = 100 * time.Millisecond
	srv := etcdtest.Start(t)
	cli := newEtcdClient(t, srv)
	defer cli.Close()
	dests := newMemDestinations(t, "a", "b")
	var (
		s      [2]*Scheduler
		locks  [2]*countingLock
		cancel [2]context.CancelFunc
		done   [2]chan error
	)
	j := continuousJob()
	for i := range s {
		lockCli := newEtcdClient(t, srv)
		defer lockCli.Close()
		// The default TTL: a short one expires while a busy machine
		// delays the keep-alives, and two replicas then follow at once.
		locks[i] = &countingLock{Lock: &EtcdLock{Client: lockCli, Prefix: "/locks/"}}
		var err error
		s[i], err = New(Config{Runner: etcdRunner(t, srv, dests), Lock: locks[i], Logger: testLogger(t)})
		require.NoError(t, err)
		require.NoError(t, s[i].Set(j))
		var ctx context.Context
		ctx, cancel[i] = context.WithCancel(t.Context())
		done[i] = make(chan error, 1)
		go func() { done[i] <- s[i].Start(ctx) }()
	}
	following := func(i int) bool { st, _ := s[i].Get(j.ID); return st.Following }
	eventually(t, func() bool { return following(0) || following(1) }, "a replica follows")
	first := 0
	if following(1) {
		first = 1
	}
	waitCommitted(t, dests, put(t, cli, 30))
	// The other replica tries the lock again and again, and loses.
	tried := locks[1-first].refused.Load()
	eventually(t, func() bool { return locks[1-first].refused.Load() >= tried+2 }, "the other replica tries the lock")
	assert.False(t, following(1-first), "the other replica does not follow")

	cancel[first]()
	require.NoError(t, <-done[first])
	eventually(t, func() bool { return following(1 - first) }, "the other replica takes over")
	waitCommitted(t, dests, put(t, cli, 30))
	for _, name := range []string{"a", "b"} {
		chainOf(t, dests[name], "prod-a")
	}
	cancel[1-first]()
	require.NoError(t, <-done[1-first])
}

// TestKeysJSONJob: a keys-json job exports the keys under its prefixes
// through the same runner, and its retention counts its own exports only.
func TestKeysJSONJob(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := newEtcdClient(t, srv)
	defer cli.Close()
	for _, k := range []string{"/a/1", "/a/2", "/b/1"} {
		_, err := cli.Put(t.Context(), k, "v")
		require.NoError(t, err)
	}
	dests := newMemDestinations(t, "a")
	r := etcdRunner(t, srv, dests)
	now := utc("2026-01-01T00:00:00Z")
	r.Now = func() time.Time { return now }
	snapJob := Job{ID: "snap", Schedule: "@hourly", Cluster: "prod-a", Name: "hourly", Destinations: []string{"a"}, Retention: retention.KeepLast(1)}
	keysJob := Job{ID: "keys", Schedule: "@hourly", Cluster: "prod-a", Name: "hourly", Destinations: []string{"a"},
		Retention: retention.KeepLast(2), Kind: backup.KindKeysJSON, Prefixes: []string{"/a/"}}
	require.NoError(t, keysJob.Validate())
	require.NoError(t, r.Backup(t.Context(), snapJob, now))
	for i := range 3 {
		now = now.Add(time.Hour)
		require.NoError(t, r.Backup(t.Context(), keysJob, now), "export %d", i)
		require.NoError(t, r.Prune(t.Context(), keysJob))
	}
	require.NoError(t, r.Prune(t.Context(), snapJob))
	entries, err := backup.ListBackups(t.Context(), dests["a"], "prod-a")
	require.NoError(t, err)
	kinds := map[backup.Kind]int{}
	for _, e := range entries {
		kinds[e.Kind]++
		if e.Kind == backup.KindKeysJSON {
			assert.Equal(t, int64(2), e.Manifest.Keys, "the keys under /a/ only")
		}
	}
	assert.Equal(t, map[backup.Kind]int{backup.KindBackup: 1, backup.KindKeysJSON: 2}, kinds, "each kind kept by its own count")

	inv := dests.inventory()
	last, ok, err := inv.LastBackup(t.Context(), keysJob)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, now, last.UTC(), "the keys-json job's last backup is its newest export")
	last, ok, err = inv.LastBackup(t.Context(), snapJob)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, utc("2026-01-01T00:00:00Z"), last.UTC(), "the snapshot job's last backup is its snapshot")
}

func TestJobKindsValidate(t *testing.T) {
	base := continuousJob()
	for name, mutate := range map[string]func(*Job){
		"prefixes on a snapshot job": func(j *Job) { j.Prefixes = []string{"/a/"} },
		"unknown kind":               func(j *Job) { j.Kind = "tarball" },
		"continuous one-shot":        func(j *Job) { j.Schedule = "" },
		"short window":               func(j *Job) { j.Continuous.Window = time.Second },
		"negative flush":             func(j *Job) { j.Continuous.FlushInterval = -time.Second },
		"continuous keys-json":       func(j *Job) { j.Kind = backup.KindKeysJSON },
	} {
		t.Run(name, func(t *testing.T) {
			j := base.clone()
			mutate(&j)
			assert.ErrorIs(t, j.Validate(), ErrInvalidJob)
		})
	}
	require.NoError(t, base.Validate())

	s, err := New(Config{Runner: RunnerFuncs{}})
	require.NoError(t, err)
	assert.ErrorIs(t, s.Set(base), ErrInvalidJob, "a runner without Follow cannot run a continuous job")
}

// blockingRunner is a PipelineRunner whose backups of one job wait for a
// release.
type blockingRunner struct {
	*PipelineRunner
	job     string
	release chan struct{}
}

func (r *blockingRunner) Backup(ctx context.Context, job Job, tick time.Time) error {
	if job.ID == r.job {
		select {
		case <-r.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return r.PipelineRunner.Backup(ctx, job, tick)
}

// TestContinuousJobWaitsForASlot: a continuous backup starts under the
// scheduler's concurrency limit: with one slot taken by a backup run, it
// waits for that run to end.
func TestContinuousJobWaitsForASlot(t *testing.T) {
	srv := etcdtest.Start(t)
	dests := newMemDestinations(t, "a", "b")
	r := &blockingRunner{PipelineRunner: etcdRunner(t, srv, dests), job: "one-shot", release: make(chan struct{})}
	// A manual clock: the follower's retries for a slot wait on it, so the
	// test sees it refused and waiting instead of guessing how long that
	// takes.
	clk := scheduletest.NewClock(utc("2026-01-01T00:00:00Z"))
	s, err := New(Config{Runner: r, MaxConcurrent: 1, Clock: clk, Logger: testLogger(t)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()

	require.NoError(t, s.Set(Job{ID: "one-shot", Cluster: "prod-a", Name: "manual", Destinations: []string{"a"}}))
	eventually(t, func() bool { st, _ := s.Get("one-shot"); return st.Running }, "the one-shot backup runs")
	j := continuousJob()
	require.NoError(t, s.Set(j))
	retry := clk.Now().Add(admitRetry)
	eventually(t, func() bool { next, ok := clk.Next(); return ok && next.Equal(retry) }, "the continuous backup was refused a slot")
	st, _ := s.Get(j.ID)
	assert.False(t, st.Following, "no slot: the continuous backup waits")
	assert.Zero(t, lastRevision(t, dests["a"], "prod-a"), "and wrote nothing")

	close(r.release)
	eventually(t, func() bool { st, _ := s.Get("one-shot"); return !st.Running }, "the one-shot backup ends")
	clk.Set(retry)
	eventually(t, func() bool { st, _ := s.Get(j.ID); return st.Following }, "the job follows once the slot is free")
	cancel()
	require.NoError(t, <-done)
}
