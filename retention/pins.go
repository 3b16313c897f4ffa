package retention

import "sync"

// PinSet is the Pins a host shares between its restores and its pruners:
// Pin marks a backup in use until the function it returns is called, and a
// Pruner with the set skips every pinned backup. restore.Restorer pins the
// backup it reads when its Pins field holds the set. A backup may be pinned
// several times at once; it stays pinned until every pin is released.
//
// The zero value is an empty set, ready to use. A PinSet is safe for
// concurrent use and must not be copied after first use.
type PinSet struct {
	mu   sync.Mutex
	held map[pinKey]int
}

type pinKey struct{ cluster, id string }

var _ Pins = (*PinSet)(nil)

// Pin marks the backup id of cluster in use and returns the function that
// releases this pin; calling it again does nothing.
func (s *PinSet) Pin(cluster, id string) (unpin func()) {
	k := pinKey{cluster, id}
	s.mu.Lock()
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
	}
}

// Pinned implements Pins.
func (s *PinSet) Pinned(cluster, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[pinKey{cluster, id}] > 0
}
