// Package servertest runs the server processes that integration tests need
// (MinIO, fake-gcs-server, Azurite): it finds the binary `make tools`
// installed, picks free loopback ports, starts the process in a process group
// of its own, waits until it is ready, keeps what it printed for failure
// messages, and stops it.
//
// A missing binary fails the test: integration tests in this module never
// skip.
package servertest

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	stopTimeout = 15 * time.Second
	maxOutput   = 1 << 20
	pollEvery   = 50 * time.Millisecond
)

// Binary returns the path of a server binary, or fails tb saying how to
// install it. The environment variable env, when set, names the binary;
// otherwise it is rel under the module root (the directory holding go.mod,
// searched upwards from the working directory). name prefixes messages.
func Binary(tb testing.TB, name, env, rel string) string {
	tb.Helper()
	bin := os.Getenv(env)
	if bin == "" {
		root, err := ModuleRoot()
		if err != nil {
			tb.Fatalf("%s: %v; set %s or run `make tools` in the module root", name, err, env)
		}
		bin = filepath.Join(root, rel)
	}
	fi, err := os.Stat(bin)
	if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		tb.Fatalf("%s: no executable at %s: run `make tools` in the module root (or set %s)", name, bin, env)
	}
	return bin
}

// ModuleRoot walks up from the working directory to the directory holding
// go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// FreeAddr returns a loopback host:port that was free a moment ago. Another
// process can take it before the server binds it, so callers retry a start
// on a new address.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("servertest: find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Process is one run of a server binary.
type Process struct {
	cmd    *exec.Cmd
	out    *output
	exited chan struct{} // closed once cmd.Wait returned
	err    error         // cmd.Wait's result, readable after exited closes
}

// Launch starts cmd with its output captured, then calls ready every 50 ms
// until it returns nil. It fails when the process exits first or timeout
// passes; the process is then gone, and the returned Process, never nil,
// still holds what it printed.
func Launch(cmd *exec.Cmd, timeout time.Duration, ready func() error) (*Process, error) {
	out := &output{}
	cmd.Stdout, cmd.Stderr = out, out
	// A process group of its own keeps a Ctrl-C meant for `go test` from
	// reaching the server before the test's cleanup stops it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &Process{cmd: cmd, out: out, exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		close(p.exited)
		return p, err
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	name := filepath.Base(cmd.Path)
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return p, nil
		}
		select {
		case <-p.exited:
			return p, fmt.Errorf("%s exited before it was ready: %v", name, p.err)
		case <-time.After(pollEvery):
		}
		if time.Now().After(deadline) {
			p.Terminate()
			return p, fmt.Errorf("%s not ready after %v (last: %v)", name, timeout, err)
		}
	}
}

// StartOnFreePort launches the command cmd builds for a free loopback
// address and waits until ready (built for the same address) passes, as
// Launch does, and stops the process when the test ends. Another process
// may take the address first, so it tries three addresses before it fails
// tb, showing what the server printed. name prefixes messages.
func StartOnFreePort(tb testing.TB, name string, timeout time.Duration, cmd func(addr string) *exec.Cmd, ready func(addr string) func() error) (addr string) {
	tb.Helper()
	var lastErr error
	for range 3 {
		addr = FreeAddr(tb)
		p, err := Launch(cmd(addr), timeout, ready(addr))
		if err == nil {
			tb.Cleanup(p.Terminate)
			return addr
		}
		lastErr = err
		tb.Logf("%s: start on %s: %v\n%s", name, addr, err, p.Output())
	}
	tb.Fatalf("%s: %v", name, lastErr)
	return ""
}

// Port returns the port of a host:port address.
func Port(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// Output returns what the process printed, up to its first MiB.
func (p *Process) Output() string { return p.out.String() }

// Terminate sends SIGTERM, then SIGKILL if the process lingers, and waits
// for it to exit.
func (p *Process) Terminate() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(stopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// HTTPReady returns a readiness check that GETs each URL in turn and wants a
// status below 500 from all (a server that answers 4xx to an anonymous
// request is serving). Its connections are closed after every call, so no
// idle connection outlives the start.
func HTTPReady(urls ...string) func() error { return HTTPSReady(nil, urls...) }

// HTTPSReady is HTTPReady for https URLs, with cfg as the client's TLS
// configuration (its roots trust the server's authority).
func HTTPSReady(cfg *tls.Config, urls ...string) func() error {
	return func() error {
		tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: cfg}
		client := &http.Client{Timeout: 2 * time.Second, Transport: tr}
		for _, u := range urls {
			resp, err := client.Get(u)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode >= 500 {
				return fmt.Errorf("GET %s: %s", u, resp.Status)
			}
		}
		return nil
	}
}

// output collects a process' stdout and stderr, keeping the first
// maxOutput bytes.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if room := maxOutput - o.buf.Len(); room > 0 {
		o.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}
