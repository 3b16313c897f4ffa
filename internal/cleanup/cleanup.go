// Package cleanup gives the work that must outlive a cancelled context
// (removing an uncommitted object, aborting an upload, storing a
// follower's last segment, releasing a lock) a context of its own, and
// lets the code that started the work bound it from outside.
//
// Such work runs on a context that keeps ctx's values but not its
// cancellation, with a timeout of its own: the cancellation that made it
// necessary must not stop it. A bare context.WithoutCancel would escape
// every bound of the caller as well; Bound attaches one that Context
// honours:
//
//	ctx, end := cleanup.Bound(ctx) // the scheduler, at Start
//	...
//	end(errBudgetSpent)             // its stop budget is spent
//
//	cctx, cancel := cleanup.Context(ctx, time.Minute) // deep in a run
//	defer cancel()                                    // ends at the minute, or at end
//
// Some cleanup work publishes: it makes data visible to others (a
// follower's last segment and its manifest). PublishBound attaches a
// bound that ends that work only, obtained with Publish, and not the
// cleanups that write nothing shared (aborting one's own upload, removing
// one's own temporary file, reading back one's own commit): a follower
// whose lock is lost must not publish, since another replica may follow
// the cluster now, but should still clean up after itself. Bound ends
// both kinds.
package cleanup

import (
	"context"
	"time"
)

type (
	boundKey   struct{}
	publishKey struct{}
)

// Bound returns a copy of ctx, and the function that ends every cleanup
// context derived from it by Context or Publish, at once and for the
// future, with the given cause. Bounds nest: a cleanup context ends with
// the first of the bounds of its ctx that ends. Call end when the bound
// is no longer needed, to free it.
func Bound(ctx context.Context) (_ context.Context, end context.CancelCauseFunc) {
	return bound(ctx, boundKey{})
}

// PublishBound is Bound for the cleanup contexts derived by Publish only:
// ending it leaves those of Context running.
func PublishBound(ctx context.Context) (_ context.Context, end context.CancelCauseFunc) {
	return bound(ctx, publishKey{})
}

func bound(ctx context.Context, key any) (context.Context, context.CancelCauseFunc) {
	parent, ok := ctx.Value(key).(context.Context)
	if !ok {
		parent = context.Background()
	}
	limit, end := context.WithCancelCause(parent)
	return context.WithValue(ctx, key, limit), end
}

// Ended reports the cause of the end of a bound of ctx (of either kind:
// work that publishes must not start), and nil while none has ended (or
// ctx has none).
func Ended(ctx context.Context) error {
	for _, key := range []any{boundKey{}, publishKey{}} {
		if limit, ok := ctx.Value(key).(context.Context); ok && limit.Err() != nil {
			return context.Cause(limit)
		}
	}
	return nil
}

// Context returns a context for cleanup work after ctx may have been
// cancelled: it keeps ctx's values, ends after timeout, and ends when a
// Bound of ctx ends (already ended when one has). A PublishBound does not
// end it.
func Context(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return withLimits(ctx, timeout, boundKey{})
}

// Publish is Context for cleanup work that publishes: it also ends when a
// PublishBound of ctx ends.
func Publish(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return withLimits(ctx, timeout, boundKey{}, publishKey{})
}

func withLimits(ctx context.Context, timeout time.Duration, keys ...any) (context.Context, context.CancelFunc) {
	c, cancelTimeout := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	c, cancel := context.WithCancelCause(c)
	stops := make([]func() bool, 0, len(keys))
	for _, key := range keys {
		limit, ok := ctx.Value(key).(context.Context)
		if !ok {
			continue
		}
		if limit.Err() != nil {
			cancel(context.Cause(limit))
		}
		stops = append(stops, context.AfterFunc(limit, func() { cancel(context.Cause(limit)) }))
	}
	return c, func() {
		for _, stop := range stops {
			stop()
		}
		cancel(nil)
		cancelTimeout()
	}
}
