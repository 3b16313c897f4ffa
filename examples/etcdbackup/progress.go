package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/etcdbackup/etcdbackup/backup"
)

// progress is what save reports its backup's events to.
type progress interface {
	backup.Observer
	// close stops what the display runs; the backup has ended.
	close()
}

// newProgress returns a display for w: one line redrawn in place when w is
// a terminal, else plain lines appended.
func newProgress(w io.Writer) progress {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return newTermProgress(w, time.Now, 500*time.Millisecond)
	}
	return &saveProgress{w: w}
}

func (p *saveProgress) close() {}

// termProgress redraws one line on a terminal with the bytes read, the
// percent of the expected size, the rate and the time left, on a timer:
// the line moves even while no byte does.
type termProgress struct {
	mu            sync.Mutex
	w             io.Writer
	now           func() time.Time
	started       time.Time
	raw, expected int64
	live          bool // a line is drawn and not ended
	// rate is the read rate smoothed over the redraws (bytes/s), from
	// the bytes read at lastAt: progress arrives in bursts, and an
	// average from the start would say hours left in the first second.
	rate               float64
	lastRaw            int64
	lastAt             time.Time
	stop               chan struct{}
	done               chan struct{}
	tickEvery          time.Duration
	startOnce, endOnce sync.Once
}

func newTermProgress(w io.Writer, now func() time.Time, every time.Duration) *termProgress {
	return &termProgress{w: w, now: now, tickEvery: every, stop: make(chan struct{}), done: make(chan struct{})}
}

// Observe records the event; lines of their own (started, stored on a
// destination, completed) are printed above the redrawn one.
func (p *termProgress) Observe(e backup.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e.ExpectedBytes > 0 {
		p.expected = e.ExpectedBytes
	}
	switch e.Kind {
	case backup.Started:
		p.started = p.now()
		p.println(fmt.Sprintf("backup %s of cluster %s started", e.ID, e.Cluster))
		p.startOnce.Do(func() { go p.tick() })
	case backup.Progress:
		p.raw = e.RawBytes
	case backup.Uploaded:
		if line := uploadedLine(e); line != "" {
			p.println(line)
		}
	case backup.Completed:
		p.raw = e.RawBytes
		p.println(fmt.Sprintf("backup %s completed in %s", e.ID, e.Elapsed.Round(time.Millisecond)))
	}
}

// println ends the redrawn line, prints line and draws the redrawn one
// again below it. The caller holds p.mu.
func (p *termProgress) println(line string) {
	fmt.Fprintf(p.w, "\r\x1b[K%s\n", line)
	p.live = false
}

// tick redraws the line until close.
func (p *termProgress) tick() {
	defer close(p.done)
	t := time.NewTicker(p.tickEvery)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			fmt.Fprintf(p.w, "\r\x1b[K%s", p.line())
			p.live = true
			p.mu.Unlock()
		}
	}
}

// line is the redrawn line: "  512 MiB of 1.0 GiB (50%), 120 MiB/s, 4s left".
// The caller holds p.mu.
func (p *termProgress) line() string {
	now := p.now()
	elapsed := now.Sub(p.started)
	p.smooth(now)
	rate := p.rate
	if p.expected <= 0 {
		return fmt.Sprintf("  %s read, %s/s, %s", size(p.raw), size(int64(rate)), elapsed.Round(time.Second))
	}
	pct := min(99, p.raw*100/p.expected) // the database size is an estimate of the stream's
	left := "?"
	if rate > 0 && elapsed >= settleTime {
		left = (time.Duration(float64(max(p.expected-p.raw, 0))/rate) * time.Second).Round(time.Second).String()
	}
	return fmt.Sprintf("  %s of %s (%d%%), %s/s, %s left", size(p.raw), size(p.expected), pct, size(int64(rate)), left)
}

// settleTime is how long the display reads before it estimates the time
// left: the first bytes come after etcd opens its snapshot.
const settleTime = 2 * time.Second

// smoothing is the weight of the newest interval in the smoothed rate.
const smoothing = 0.3

// smooth folds the rate since the previous redraw into p.rate. The caller
// holds p.mu.
func (p *termProgress) smooth(now time.Time) {
	if p.lastAt.IsZero() {
		p.lastAt = p.started
	}
	dt := now.Sub(p.lastAt).Seconds()
	if dt <= 0 {
		return
	}
	inst := float64(p.raw-p.lastRaw) / dt
	if p.rate == 0 {
		p.rate = inst
	} else {
		p.rate = smoothing*inst + (1-smoothing)*p.rate
	}
	p.lastRaw, p.lastAt = p.raw, now
}

// close stops the redraws and ends the line.
func (p *termProgress) close() {
	p.endOnce.Do(func() {
		close(p.stop)
		p.startOnce.Do(func() { close(p.done) }) // never started
		<-p.done
		p.mu.Lock()
		if p.live {
			fmt.Fprint(p.w, "\r\x1b[K")
			p.live = false
		}
		p.mu.Unlock()
	})
}
