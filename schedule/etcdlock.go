package schedule

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/etcdbackup/etcdbackup/internal/cleanup"
)

// Defaults of EtcdLock.
const (
	DefaultLockPrefix = "/etcdbackup/schedule/"
	DefaultLockTTL    = 30 * time.Second
)

// EtcdLock is a Lock kept in an etcd cluster that every replica of the host
// reaches (usually the host's own etcd, not one it backs up). Each run
// takes the job's mutex (go.etcd.io/etcd/client/v3/concurrency) on a lease
// of its own, which etcd expires TTL after the holder stops renewing it.
// Under the mutex, the last completed tick of each job is kept, so that a
// replica that comes to a tick after another replica completed it skips
// it: the mutex alone cannot tell that.
//
// Keys, with the job ID path-escaped:
//
//	<prefix>lock/<job>/<lease>   the mutex (one key per holder or waiter)
//	<prefix>tick/<job>           the last completed tick, RFC 3339 in UTC
//
// The keys of a removed job stay (a few bytes each); a host that deletes
// jobs for good may delete <prefix>tick/<job>.
type EtcdLock struct {
	// Client reaches the etcd that holds the locks. Required.
	Client *clientv3.Client
	// Prefix starts every key. Empty means DefaultLockPrefix.
	Prefix string
	// TTL is how long a lock outlives a holder that stopped renewing it
	// (a crashed replica), in whole seconds. Zero means DefaultLockTTL.
	TTL time.Duration
}

var _ Lock = (*EtcdLock)(nil)

// Validate reports a missing client and a TTL under one second.
func (l *EtcdLock) Validate() error {
	if l.Client == nil {
		return errors.New("etcd lock has no client")
	}
	if l.TTL != 0 && l.TTL < time.Second {
		return errors.New("etcd lock TTL under one second")
	}
	return nil
}

func (l *EtcdLock) keys(jobID string) (mutex, tick string) {
	prefix := l.Prefix
	if prefix == "" {
		prefix = DefaultLockPrefix
	}
	id := url.PathEscape(jobID)
	return prefix + "lock/" + id, prefix + "tick/" + id
}

// Acquire implements Lock: it takes the job's mutex without waiting, then
// reads the job's last completed tick.
func (l *EtcdLock) Acquire(ctx context.Context, jobID string, tick time.Time) (Held, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	ttl := l.TTL
	if ttl == 0 {
		ttl = DefaultLockTTL
	}
	mutexKey, tickKey := l.keys(jobID)

	// The session outlives the run's context so that its lease is revoked
	// at Release even when the run was cancelled; until the mutex is
	// taken, ctx cancels it.
	sessCtx, cancelSess := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancelSess)
	sess, err := concurrency.NewSession(l.Client, concurrency.WithTTL(int(ttl/time.Second)), concurrency.WithContext(sessCtx))
	if err != nil {
		stop()
		cancelSess()
		return nil, fmt.Errorf("etcd lock session: %w", err)
	}
	h := &etcdHeld{l: l, sess: sess, cancel: cancelSess, mutex: concurrency.NewMutex(sess, mutexKey), tickKey: tickKey, tick: tick}
	fail := func(err error) (Held, error) {
		stop()
		// The cleanup runs on a context of its own, bounded: ctx may have
		// ended after etcd created this attempt's key, which must not
		// block the other replicas until the lease expires.
		cctx, cancel := cleanup.Context(ctx, releaseTimeout)
		defer cancel()
		_ = h.close(cctx, false)
		return nil, err
	}
	if err := h.mutex.TryLock(ctx); err != nil {
		if errors.Is(err, concurrency.ErrLocked) {
			return fail(ErrLocked)
		}
		return fail(fmt.Errorf("etcd lock: %w", err))
	}
	h.locked = true
	if !tick.IsZero() {
		resp, err := l.Client.Get(ctx, tickKey)
		if err != nil {
			return fail(fmt.Errorf("etcd lock: read last tick: %w", err))
		}
		if len(resp.Kvs) > 0 {
			done, err := time.Parse(time.RFC3339Nano, string(resp.Kvs[0].Value))
			if err == nil && !done.Before(tick) {
				return fail(ErrTickDone)
			}
		}
	}
	if !stop() {
		// ctx ended while the mutex was being taken: the session is gone.
		return fail(fmt.Errorf("etcd lock: %w", context.Cause(ctx)))
	}
	return h, nil
}

type etcdHeld struct {
	l       *EtcdLock
	sess    *concurrency.Session
	cancel  context.CancelFunc
	mutex   *concurrency.Mutex
	locked  bool
	tickKey string
	tick    time.Time
}

// Lost is closed when the session's lease can no longer be renewed.
func (h *etcdHeld) Lost() <-chan struct{} { return h.sess.Done() }

// Release records the tick, if completed, in the same transaction that
// checks the mutex is still held, then unlocks it and revokes the lease.
func (h *etcdHeld) Release(ctx context.Context, completed bool) error {
	return h.close(ctx, completed)
}

func (h *etcdHeld) close(ctx context.Context, completed bool) error {
	var errs []error
	if completed && h.locked && !h.tick.IsZero() {
		resp, err := h.l.Client.Txn(ctx).
			If(h.mutex.IsOwner()).
			Then(clientv3.OpPut(h.tickKey, h.tick.UTC().Format(time.RFC3339Nano))).
			Commit()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("etcd lock: record tick: %w", err))
		case !resp.Succeeded:
			errs = append(errs, fmt.Errorf("etcd lock: record tick: %w", errLockLost))
		}
	}
	if h.locked {
		if err := h.mutex.Unlock(ctx); err != nil {
			errs = append(errs, fmt.Errorf("etcd lock: unlock: %w", err))
		}
	}
	// Revoking the lease removes the mutex key in any case, also the key
	// of an attempt that did not take the mutex (TryLock deletes it on
	// the caller's context, which may have ended). It runs on ctx, not on
	// the session's context, which the caller's may have cancelled.
	if _, err := h.l.Client.Revoke(ctx, h.sess.Lease()); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		errs = append(errs, fmt.Errorf("etcd lock: revoke lease: %w", err))
	}
	h.cancel() // ends the session's keep-alive
	return errors.Join(errs...)
}
