//go:build etcdbackup_faultpoints && unix

package faultpoint

import (
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Enabled reports whether the build has fault points.
const Enabled = true

var (
	mu     sync.Mutex
	target string
	nth    = 1
	passes int
)

func init() {
	v := os.Getenv(Variable)
	name, count, ok := strings.Cut(v, ":")
	target = name
	if ok {
		if n, err := strconv.Atoi(count); err == nil && n > 0 {
			nth = n
		}
	}
}

// Hit kills the process with SIGKILL if name is the step, and this its
// pass, that ETCDBACKUP_FAULTPOINT names.
func Hit(name string) {
	if target == "" || name != target {
		return
	}
	mu.Lock()
	passes++
	kill := passes == nth
	mu.Unlock()
	if kill {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not caught: wait for it
	}
}

// Reader returns a reader of r that hits name after its first read that
// returns bytes.
func Reader(name string, r io.Reader) io.Reader {
	if target != name {
		return r
	}
	return &reader{name: name, r: r}
}

type reader struct {
	name string
	r    io.Reader
	hit  bool
}

func (r *reader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 && !r.hit {
		r.hit = true
		Hit(r.name)
	}
	return n, err
}
