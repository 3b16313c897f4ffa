package destination

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Run checks the availability of every destination and syncs its
// inventory, each at its own interval (Spec.CheckInterval,
// Spec.PollInterval, or the registry's defaults), until ctx ends or the
// registry is closed; then it stops every goroutine it started and returns
// nil (ErrClosed if the registry was already closed). Destinations added
// while it runs are checked and synced at once; an updated one is checked
// and synced again at once. Only one Run may be active at a time.
//
// Run has the shape of a controller-manager's runnable: Start(ctx) error.
func (r *Registry) Run(ctx context.Context) error {
	r.mu.Lock()
	switch {
	case r.closed:
		r.mu.Unlock()
		return ErrClosed
	case r.running:
		r.mu.Unlock()
		return errors.New("destination registry is already running")
	}
	r.running = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.running = false
		r.mu.Unlock()
	}()

	var wg sync.WaitGroup
	workers := map[*Destination]context.CancelFunc{}
	defer func() {
		for _, cancel := range workers {
			cancel()
		}
		wg.Wait()
	}()
	for {
		r.mu.RLock()
		closed := r.closed
		live := make(map[*Destination]bool, len(r.dests))
		for _, d := range r.dests {
			live[d] = true
		}
		r.mu.RUnlock()
		if closed {
			return nil
		}
		for d, cancel := range workers {
			if !live[d] {
				cancel()
				delete(workers, d)
			}
		}
		for d := range live {
			if _, ok := workers[d]; ok {
				continue
			}
			wctx, cancel := context.WithCancel(ctx)
			workers[d] = cancel
			wg.Go(func() {
				r.every(wctx, d.wakeCheck, func() time.Duration { return r.checkInterval(d) }, func() { r.check(wctx, d) })
			})
			wg.Go(func() {
				r.every(wctx, d.wakeSync, func() time.Duration { return r.pollInterval(d) }, func() { _, _ = r.sync(wctx, d) })
			})
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.changed:
		}
	}
}

// every runs work at once, then each interval after the previous run
// ended, or at once when wake fires, until ctx ends.
func (r *Registry) every(ctx context.Context, wake <-chan struct{}, interval func() time.Duration, work func()) {
	select {
	case <-wake: // a nudge from before this Run: the first run covers it
	default:
	}
	for {
		work()
		t := time.NewTimer(interval())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-wake:
			t.Stop()
		case <-t.C:
		}
	}
}
