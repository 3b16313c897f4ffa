package s3

import (
	"context"
	"sync"
)

// partPool hands out part buffers of any size while the bytes of the
// buffers it holds stay within budget: as the sizer changes the part
// size, free buffers of another size are unmapped before new ones are
// mapped, so the number of buffers follows the size.
type partPool struct {
	budget int64
	onMap  func(held int64) // test hook: the bytes held after a map

	mu    sync.Mutex
	held  int64                // bytes of every buffer mapped and not yet unmapped
	all   map[*[]byte]struct{} // every buffer mapped and not yet unmapped
	free  []*[]byte            // buffers whose part request has ended
	freed chan struct{}
}

func newPartPool(budget int64, onMap func(int64)) *partPool {
	return &partPool{budget: budget, onMap: onMap, all: map[*[]byte]struct{}{}, freed: make(chan struct{}, 1)}
}

// get returns a buffer of size bytes, mapping one when the budget has
// room, else waiting for a part request to end.
func (p *partPool) get(ctx context.Context, size int64) (*[]byte, error) {
	for {
		buf, err := p.take(size)
		if buf != nil || err != nil {
			return buf, err
		}
		select {
		case <-p.freed:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// take returns a buffer of size bytes if one is free or the budget has
// room for it, else nil.
func (p *partPool) take(size int64) (*[]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, buf := range p.free {
		if int64(len(*buf)) == size {
			p.free = append(p.free[:i], p.free[i+1:]...)
			return buf, nil
		}
	}
	if p.held+size > p.budget {
		// Buffers of another size make room for this one.
		for _, buf := range p.free {
			p.unmap(buf)
		}
		p.free = p.free[:0]
	}
	if p.held+size > p.budget && p.held > 0 {
		return nil, nil
	}
	buf, err := newPartBuffer(size)
	if err != nil {
		return nil, err
	}
	p.held += size
	p.all[buf] = struct{}{}
	if p.onMap != nil {
		p.onMap(p.held)
	}
	return buf, nil
}

// put returns buf, whose request has ended and whose body is detached.
func (p *partPool) put(buf *[]byte) {
	p.mu.Lock()
	p.free = append(p.free, buf)
	p.mu.Unlock()
	select {
	case p.freed <- struct{}{}:
	default:
	}
}

// release unmaps every buffer. No part request may be running, and every
// request body must be detached.
func (p *partPool) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for buf := range p.all {
		p.unmap(buf)
	}
	p.free = nil
}

func (p *partPool) unmap(buf *[]byte) {
	p.held -= int64(len(*buf))
	delete(p.all, buf)
	freePartBuffer(buf)
}
