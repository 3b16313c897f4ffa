package blob

import (
	"context"
	"os"
	"sync"
)

// groupSync makes the writes of many puts on one file system durable
// together: one syncfs(2) of the file system, a round, stands for the
// fsyncs of every file and directory written before it began. A put that
// would sync its data, its ".attrs" file or its directories waits for a
// round instead (wait): the puts waiting at once share it, so that a
// bucket that hundreds of followers store segments into at once makes a
// few dozen syncs a second, not thousands. This matters beyond the disk:
// a goroutine in a system call keeps its processor (P) until the runtime
// takes it back, after 20 µs to 10 ms, so thousands of short fsyncs a
// second keep most of a small machine's processors waiting for the disk
// while runnable goroutines queue (measured with an execution trace of
// 1,000 followers on 2 cores: the processors spent 1.5 of every 2 seconds
// in fsyncs shorter than a millisecond).
//
// Rounds run one at a time, on a goroutine of their own that ends when
// none is waiting. A round covers the waiters that joined it before it
// began; one that joins while a round runs waits for the next. A failed
// syncfs fails every waiter of its round: what it reports may be another
// file's write-back error, and the put fails, as it would if it were its
// own (the caller retries).
//
// Only a file system whose syncfs(2) syncs every file's data and the
// directories' names, and reports write-back errors (Linux 5.8 and later),
// has a groupSync (openGroupSync); elsewhere puts sync each file and
// directory.
type groupSync struct {
	// dev is the file system's device: a file on another one (a mount
	// inside the bucket's directory) is not covered by a round.
	dev  uint64
	f    *os.File     // the bucket's directory, kept open for syncfs(2)
	sync func() error // one round's sync

	mu      sync.Mutex
	next    *syncRound // the round waiters join, not yet begun; nil for none
	running bool       // a goroutine runs rounds
}

// syncRound is one syncfs(2) of a groupSync, shared by its waiters.
type syncRound struct {
	done    chan struct{} // closed when err is set
	err     error
	waiting int // waiters that joined it
}

// wait returns once a round that began after wait was called has ended:
// its error, or ctx's when ctx ends first (the round goes on for its
// other waiters).
func (g *groupSync) wait(ctx context.Context) error {
	g.mu.Lock()
	if g.next == nil {
		g.next = &syncRound{done: make(chan struct{})}
	}
	r := g.next
	r.waiting++
	if !g.running {
		g.running = true
		go g.run()
	}
	g.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run runs rounds while there are waiters.
func (g *groupSync) run() {
	for {
		g.mu.Lock()
		r := g.next
		g.next = nil
		if r == nil {
			g.running = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		r.err = g.sync()
		close(r.done)
	}
}

// covers reports whether a round syncs the files at paths: each is on the
// group's file system.
func (g *groupSync) covers(paths ...string) bool {
	for _, p := range paths {
		dev, ok := deviceOf(p)
		if !ok || dev != g.dev {
			return false
		}
	}
	return true
}

// close closes the directory the rounds sync through; a round after it
// fails.
func (g *groupSync) close() error {
	if g == nil {
		return nil
	}
	return g.f.Close()
}
