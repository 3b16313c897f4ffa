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
package cleanup

import (
	"context"
	"time"
)

type boundKey struct{}

// Bound returns a copy of ctx, and the function that ends every cleanup
// context derived from it by Context, at once and for the future, with
// the given cause. Bounds nest: a cleanup context ends with the first of
// the bounds of its ctx that ends. Call end when the bound is no longer
// needed, to free it.
func Bound(ctx context.Context) (_ context.Context, end context.CancelCauseFunc) {
	parent, ok := ctx.Value(boundKey{}).(context.Context)
	if !ok {
		parent = context.Background()
	}
	limit, end := context.WithCancelCause(parent)
	return context.WithValue(ctx, boundKey{}, limit), end
}

// Ended reports the cause of the end of ctx's bound, and nil while it
// has not ended (or ctx has none).
func Ended(ctx context.Context) error {
	if limit, ok := ctx.Value(boundKey{}).(context.Context); ok && limit.Err() != nil {
		return context.Cause(limit)
	}
	return nil
}

// Context returns a context for cleanup work after ctx may have been
// cancelled: it keeps ctx's values, ends after timeout, and ends when a
// bound of ctx ends (already ended when one has).
func Context(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	c, cancelTimeout := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	limit, ok := ctx.Value(boundKey{}).(context.Context)
	if !ok {
		return c, cancelTimeout
	}
	c, cancel := context.WithCancelCause(c)
	if limit.Err() != nil {
		cancel(context.Cause(limit))
	}
	stop := context.AfterFunc(limit, func() { cancel(context.Cause(limit)) })
	return c, func() {
		stop()
		cancel(nil)
		cancelTimeout()
	}
}
