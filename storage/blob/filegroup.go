package blob

import (
	"context"
	"fmt"
	"os"
	"sync"
)

// groupSync makes the writes of many puts on one file system durable
// together: one syncfs(2) of the file system, a round, stands for the
// fsyncs of every file and directory written before it began. A put that
// would sync its data, its ".attrs" file or its directories waits for a
// round instead (wait): the puts waiting at once share it, so that a
// bucket that a thousand followers store segments into makes about a
// hundred syncs a second, not thousands. This matters beyond the disk:
// a goroutine in a system call keeps its processor (P) until the runtime
// takes it back, after 20 µs to 10 ms, so thousands of short fsyncs a
// second keep most of a small machine's processors waiting for the disk
// while runnable goroutines queue (measured with an execution trace of
// 1,000 followers on 2 cores: the processors spent 1.5 of every 2 seconds
// in fsyncs shorter than a millisecond).
//
// Rounds run one at a time, on a goroutine of their own that ends when
// none is waiting. A round covers the waiters that joined it before it
// began; one that joins while a round runs waits for the next. A round
// is a syncfs(2) of the file system, then, on ext2/3/4 without a journal,
// an fsync(2) of the bucket's directory: there syncfs may write the
// directories' blocks after it flushed the device's cache, and the fsync
// flushes it again once they are written (flushAfter; a journal's commit,
// XFS's log and Btrfs's and F2FS's checkpoints flush after what they
// write).
//
// syncfs(2) reports a write-back error of any file of the file system
// once to the descriptor it is called on, whichever round that is: the
// error of one put's pages can fail another put's round and leave the
// round of its own clean. So a put samples the count of failed rounds
// before it writes (mark) and, after its own round, if a round failed
// since (failedSince), or its own did, syncs its own files and
// directories one by one, as a bucket without a groupSync does: an fsync
// reports the write-back errors of the file's own pages, which syncfs
// does not consume. A write-back error elsewhere on the file system
// costs the puts being written those fsyncs, and fails none of them.
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
	// flushAfter has a round fsync f after syncfs: an ext2/3/4 file
	// system without a journal, or one whose journal cannot be seen.
	flushAfter bool

	mu      sync.Mutex
	next    *syncRound // the round waiters join, not yet begun; nil for none
	running bool       // a goroutine runs rounds
	failed  uint64     // rounds that failed
	lastErr error      // the last failed round's error
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
		err := g.sync()
		if err != nil {
			g.mu.Lock()
			g.failed++
			g.lastErr = err
			g.mu.Unlock()
		}
		r.err = err
		close(r.done)
	}
}

// mark returns the count of failed rounds, for failedSince: a put takes
// it before it writes anything that a round will sync.
func (g *groupSync) mark() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failed
}

// failedSince returns the error of the last failed round if a round
// failed since mark returned m: it may have reported, and so hidden from
// every later round, a write-back error of what the put wrote since.
func (g *groupSync) failedSince(m uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failed == m {
		return nil
	}
	return fmt.Errorf("a shared sync of the file system failed while the put was being written: %w", g.lastErr)
}

// waitChecked is wait, then failedSince(m).
func (g *groupSync) waitChecked(ctx context.Context, m uint64) error {
	if err := g.wait(ctx); err != nil {
		return err
	}
	return g.failedSince(m)
}

// covers reports whether a round syncs the files at paths: each is on the
// group's file system (following symbolic links: a key's directory may be
// a link to one on another file system, whose names a round does not
// sync).
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
