package schedule

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
	"github.com/etcdbackup/etcdbackup/schedule/scheduletest"
)

// startEtcd starts an etcd member and returns it with the goroutines it
// runs, to be ignored by leak checks. The member serves a request first:
// it starts some of its goroutines only as it begins serving.
func startEtcd(t *testing.T) (*etcdtest.Server, goleak.Option) {
	t.Helper()
	srv := etcdtest.Start(t)
	cli := newEtcdClient(t, srv)
	_, err := cli.Get(t.Context(), "warm-up")
	require.NoError(t, err)
	require.NoError(t, cli.Close())
	time.Sleep(50 * time.Millisecond)
	return srv, goleak.IgnoreCurrent()
}

func newEtcdClient(t *testing.T, srv *etcdtest.Server) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	return cli
}

// replicas are two schedulers of one host, each with its own etcd client
// and EtcdLock on one shared etcd, driven by one manual clock.
type replicas struct {
	t      *testing.T
	clk    *scheduletest.Clock
	rec    *recorder // both schedulers' runs
	s      [2]*Scheduler
	h      [2]*harness
	client *clientv3.Client
	prefix string
}

func newReplicas(t *testing.T, srv *etcdtest.Server, locks func(i int, l Lock) Lock) *replicas {
	t.Helper()
	r := &replicas{t: t, clk: scheduletest.NewClock(utc("2026-01-01T00:00:00Z")), prefix: "/test/" + t.Name() + "/"}
	r.rec = newRecorder(r.clk)
	for i := range 2 {
		cli := newEtcdClient(t, srv)
		if i == 0 {
			r.client = cli
		}
		// The default TTL: a short one can expire on a busy machine, whose
		// keep-alives come late, and cancel a run the test expects to end.
		var lock Lock = &EtcdLock{Client: cli, Prefix: r.prefix}
		if locks != nil {
			lock = locks(i, lock)
		}
		s, err := New(Config{Runner: r.rec, Lock: lock, Clock: r.clk, Logger: testLogger(t), MaxConcurrent: 8})
		require.NoError(t, err)
		r.s[i] = s
		r.h[i] = &harness{t: t, clk: r.clk, rec: r.rec, s: s}
		t.Cleanup(func() { _ = cli.Close() })
	}
	return r
}

func (r *replicas) set(j Job) {
	for _, s := range r.s {
		require.NoError(r.t, s.Set(j))
	}
}

func (r *replicas) start() {
	for _, h := range r.h {
		h.start()
	}
}

func (r *replicas) settle() {
	for _, h := range r.h {
		h.settle()
	}
}

func (r *replicas) stop() {
	for _, h := range r.h {
		require.NoError(r.t, h.stop())
	}
}

// TestEtcdLockTickRunsOnce: two schedulers with the same jobs on one etcd
// run each tick of each job once, not twice, and never at the same time;
// the other replica skips it, whether it came while the first was running
// (locked) or after it had completed (done).
func TestEtcdLockTickRunsOnce(t *testing.T) {
	srv, running := startEtcd(t)

	t.Run("free running", func(t *testing.T) {
		r := newReplicas(t, srv, nil)
		// Runs take a little real time, so that the replicas meet both
		// while one holds the lock and after it released it.
		r.rec.setHook(func(ctx context.Context, job Job, tick time.Time) error {
			time.Sleep(time.Duration(tick.Hour()%3) * 5 * time.Millisecond)
			return nil
		})
		ids := []string{"ns/a", "ns/b", "ns/c"}
		for _, id := range ids {
			r.set(job(id, "@hourly"))
		}
		r.start()
		const ticks = 5
		for i := 1; i <= ticks; i++ {
			r.clk.Set(utc("2026-01-01T00:00:00Z").Add(time.Duration(i) * time.Hour))
			r.settle()
		}
		for _, id := range ids {
			seen := map[time.Time]int{}
			for _, c := range r.rec.callsOf(id) {
				seen[c.tick.UTC()]++
			}
			for i := 1; i <= ticks; i++ {
				tick := utc("2026-01-01T00:00:00Z").Add(time.Duration(i) * time.Hour)
				assert.Equal(t, 1, seen[tick], "%s at %v", id, tick)
			}
			var runs, skipped int64
			for _, s := range r.s {
				st, _ := s.Get(id)
				runs += st.Successes
				skipped += st.SkippedRuns
				assert.Contains(t, []SkipReason{"", SkipLocked, SkipDone}, st.LastSkipReason)
			}
			assert.EqualValues(t, ticks, runs, id)
			assert.EqualValues(t, ticks, skipped, id)
		}
		assert.Zero(t, r.rec.overlaps, "never both replicas at once")

		resp, err := r.client.Get(t.Context(), r.prefix+"tick/ns%2Fa")
		require.NoError(t, err)
		require.Len(t, resp.Kvs, 1)
		assert.Equal(t, "2026-01-01T05:00:00Z", string(resp.Kvs[0].Value))
		resp, err = r.client.Get(t.Context(), r.prefix+"lock/", clientv3.WithPrefix())
		require.NoError(t, err)
		assert.Empty(t, resp.Kvs, "no lock left behind")
		r.stop()
	})

	t.Run("second comes after the first completed", func(t *testing.T) {
		firstDone := make(chan struct{})
		r := newReplicas(t, srv, func(i int, l Lock) Lock {
			if i == 0 {
				return l
			}
			return lockFunc(func(ctx context.Context, id string, tick time.Time) (Held, error) {
				<-firstDone
				return l.Acquire(ctx, id, tick)
			})
		})
		r.set(job("ns/a", "@hourly"))
		r.start()
		r.clk.Set(utc("2026-01-01T01:00:00Z"))
		r.h[0].settle()
		close(firstDone)
		r.h[1].settle()
		assert.Len(t, r.rec.callsOf("ns/a"), 1)
		first, _ := r.s[0].Get("ns/a")
		second, _ := r.s[1].Get("ns/a")
		assert.EqualValues(t, 1, first.Successes)
		assert.Zero(t, second.Successes)
		assert.Equal(t, SkipDone, second.LastSkipReason, "the lock was free, the tick done")
		r.stop()
	})

	t.Run("second comes while the first runs", func(t *testing.T) {
		firstRunning, secondTried := make(chan struct{}), make(chan error, 1)
		r := newReplicas(t, srv, func(i int, l Lock) Lock {
			if i == 0 {
				return l
			}
			return lockFunc(func(ctx context.Context, id string, tick time.Time) (Held, error) {
				<-firstRunning
				h, err := l.Acquire(ctx, id, tick)
				secondTried <- err
				return h, err
			})
		})
		r.rec.setHook(func(ctx context.Context, _ Job, _ time.Time) error {
			close(firstRunning)
			select {
			case err := <-secondTried:
				assert.ErrorIs(t, err, ErrLocked)
			case <-time.After(waitFor):
				t.Error("replica 1 never tried")
			}
			return nil
		})
		r.set(job("ns/a", "@hourly"))
		r.start()
		r.clk.Set(utc("2026-01-01T01:00:00Z"))
		r.settle()
		assert.Len(t, r.rec.callsOf("ns/a"), 1)
		first, _ := r.s[0].Get("ns/a")
		second, _ := r.s[1].Get("ns/a")
		assert.EqualValues(t, 1, first.Successes)
		assert.Zero(t, second.Successes)
		assert.Equal(t, SkipLocked, second.LastSkipReason)
		r.stop()
	})

	goleak.VerifyNone(t, running)
}

// lockFunc adapts a function to a Lock.
type lockFunc func(ctx context.Context, id string, tick time.Time) (Held, error)

func (f lockFunc) Acquire(ctx context.Context, id string, tick time.Time) (Held, error) {
	return f(ctx, id, tick)
}

// countingLock is a Lock that counts the acquisitions it refused with
// ErrLocked: a test waits for refusals, not for time, to know that a
// replica tried and lost.
type countingLock struct {
	Lock
	refused atomic.Int64
}

func (l *countingLock) Acquire(ctx context.Context, id string, tick time.Time) (Held, error) {
	h, err := l.Lock.Acquire(ctx, id, tick)
	if errors.Is(err, ErrLocked) {
		l.refused.Add(1)
	}
	return h, err
}

// TestEtcdLockDirect checks EtcdLock on its own: mutual exclusion, the
// tick record, zero ticks, and cleanup of a refused acquisition.
func TestEtcdLockDirect(t *testing.T) {
	srv, running := startEtcd(t)
	cli := newEtcdClient(t, srv)
	ctx := t.Context()
	l := &EtcdLock{Client: cli, Prefix: "/direct/"} // the default TTL: no lease expires under load
	t1, t2 := utc("2026-01-01T01:00:00Z"), utc("2026-01-01T02:00:00Z")

	h, err := l.Acquire(ctx, "a/b", t1)
	require.NoError(t, err)
	_, err = l.Acquire(ctx, "a/b", t1)
	assert.ErrorIs(t, err, ErrLocked)
	other, err := l.Acquire(ctx, "a%2Fb", t1) // escaping keeps IDs apart
	require.NoError(t, err)
	require.NoError(t, other.Release(ctx, false))
	require.NoError(t, h.Release(ctx, true))

	_, err = l.Acquire(ctx, "a/b", t1)
	assert.ErrorIs(t, err, ErrTickDone)
	_, err = l.Acquire(ctx, "a/b", t1.Add(-time.Hour))
	assert.ErrorIs(t, err, ErrTickDone, "an older tick is done too")

	h, err = l.Acquire(ctx, "a/b", time.Time{})
	require.NoError(t, err, "a zero tick only locks")
	require.NoError(t, h.Release(ctx, true))
	h, err = l.Acquire(ctx, "a/b", t2)
	require.NoError(t, err, "the zero tick recorded nothing")
	select {
	case <-h.Lost():
		t.Fatal("lock lost while held")
	default:
	}
	require.NoError(t, h.Release(ctx, false))
	h, err = l.Acquire(ctx, "a/b", t2)
	require.NoError(t, err, "a failed run does not complete its tick")
	require.NoError(t, h.Release(ctx, true))

	resp, err := cli.Get(ctx, "/direct/", clientv3.WithPrefix())
	require.NoError(t, err)
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, fmt.Sprintf("%s=%s", kv.Key, kv.Value))
	}
	assert.Equal(t, []string{"/direct/tick/a%2Fb=2026-01-01T02:00:00Z"}, keys, "only the tick record stays")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = l.Acquire(cancelled, "a/b", t2)
	assert.True(t, errors.Is(err, context.Canceled), "%v", err)

	assert.Error(t, (&EtcdLock{}).Validate())
	assert.Error(t, (&EtcdLock{Client: cli, TTL: time.Millisecond}).Validate())
	require.NoError(t, cli.Close())
	goleak.VerifyNone(t, running)
}
