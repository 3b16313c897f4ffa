package backup

import (
	"context"
	"fmt"
	"sync/atomic"
)

// RunSlots bounds the backups in flight of the pipelines that share it
// (Pipeline.Slots): a backup waits for a free slot before it takes its
// snapshot, and frees it when it ends. A host that runs many followers
// itself shares one among their pipelines, so that their full backups (the
// first ones, and those that start new chains) run a few at a time: each
// holds a compressor (about 40 MiB with zstd and no MemoryBudget) and the
// etcd client's messages while it runs. The scheduler has run slots of its
// own (schedule.Config.MaxConcurrent) and needs none.
//
// A follower opens the watch that holds what etcd writes during its full
// backup once it has a slot: what etcd wrote while it waited is in the
// snapshot.
type RunSlots struct {
	ch      chan struct{}
	waiting atomic.Int32 // takes waiting for a slot
}

// NewRunSlots returns slots for n backups at a time (n >= 1). The zero
// RunSlots bounds nothing.
func NewRunSlots(n int) *RunSlots {
	return &RunSlots{ch: make(chan struct{}, max(n, 1))}
}

// take waits for a free slot and returns the function that frees it. Nil
// slots, and the zero RunSlots (not made by NewRunSlots), never wait.
func (s *RunSlots) take(ctx context.Context) (release func(), err error) {
	if s == nil || s.ch == nil {
		return func() {}, nil
	}
	s.waiting.Add(1)
	defer s.waiting.Add(-1)
	select {
	case s.ch <- struct{}{}:
		return func() { <-s.ch }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for a run slot: %w", ctx.Err())
	}
}
