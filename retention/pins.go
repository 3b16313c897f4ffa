package retention

import (
	"context"
	"fmt"
	"sync"
)

// PinSet is the Pins a host shares between its restores and its pruners:
// Pin marks a backup in use until the function it returns is called, and a
// Pruner with the set skips every pinned backup. restore.Restorer pins the
// backup it reads when its Pins field holds the set. A backup may be pinned
// several times at once; it stays pinned until every pin is released.
//
// The check and the deletion are one step: a Pruner with a PinSet checks
// the pin again right before its first delete, and holds new pins of that
// backup off until its deletes have ended, so a backup pinned before that
// moment is never deleted, and a pin taken during the deletes returns
// after them (the restore then finds the backup gone, ErrNotFound, rather
// than half of it). A PinSet protects only the restores of its own
// process: see the package documentation for restores in other processes.
//
// The zero value is an empty set, ready to use. A PinSet is safe for
// concurrent use and must not be copied after first use.
type PinSet struct {
	mu       sync.Mutex
	held     map[pinKey]int
	deleting map[pinKey]chan struct{} // closed when the deletes end
}

type pinKey struct{ cluster, id string }

var _ Pins = (*PinSet)(nil)

// Pin marks the backup id of cluster in use and returns the function that
// releases this pin; calling it again does nothing. While a Pruner sharing
// the set deletes the backup, Pin waits for the deletes to end, however
// long they take: PinContext is Pin with a context that ends the wait.
func (s *PinSet) Pin(cluster, id string) (unpin func()) {
	unpin, _ = s.PinContext(context.Background(), cluster, id)
	return unpin
}

// PinContext is Pin that gives up when ctx ends first: when ctx is done
// before the pin is taken (while a Pruner sharing the set deletes the
// backup, or already on entry), it holds no pin and returns ctx's error,
// so that a cancelled restore returns at once. restore.Restorer uses it.
func (s *PinSet) PinContext(ctx context.Context, cluster, id string) (unpin func(), err error) {
	k := pinKey{cluster, id}
	s.mu.Lock()
	if err := s.waitDeletes(ctx, k); err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("pin backup %s of cluster %s: %w", id, cluster, err)
	}
	if s.held == nil {
		s.held = make(map[pinKey]int)
	}
	s.held[k]++
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.held[k]--; s.held[k] <= 0 {
				delete(s.held, k)
			}
		})
	}, nil
}

// waitDeletes waits, with s.mu held on entry and on return, until no
// Pruner deletes k, or ctx ends (its error).
func (s *PinSet) waitDeletes(ctx context.Context, k pinKey) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		done, ok := s.deleting[k]
		if !ok {
			return nil
		}
		s.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
		}
		s.mu.Lock()
	}
}

// Pinned implements Pins.
func (s *PinSet) Pinned(cluster, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[pinKey{cluster, id}] > 0
}

// holdForDelete implements deleteHolder: unless the backup is pinned, it
// holds new pins of it off until release is called.
func (s *PinSet) holdForDelete(cluster, id string) (release func(), ok bool) {
	k := pinKey{cluster, id}
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.waitDeletes(context.Background(), k) // never ends early
	if s.held[k] > 0 {
		return nil, false
	}
	if s.deleting == nil {
		s.deleting = make(map[pinKey]chan struct{})
	}
	done := make(chan struct{})
	s.deleting[k] = done
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.deleting, k)
		close(done)
	}, true
}

// deleteHolder is implemented by Pins that can make their check and a
// backup's deletion one step (PinSet).
type deleteHolder interface {
	holdForDelete(cluster, id string) (release func(), ok bool)
}
