package faultproxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// TCP is a byte-level proxy, for gRPC servers such as etcd. It can drop
// connections once a number of bytes have flowed from the server.
type TCP struct {
	ln     net.Listener
	target string
	// dropAfter, when positive, is the number of server-to-client bytes
	// after which every connection is reset.
	dropAfter atomic.Int64
	dropped   atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// StartTCP starts a proxy to target (host:port) on a free loopback port,
// stopped at the end of the test.
func StartTCP(tb testing.TB, target string) *TCP {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	p := &TCP{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *TCP) Addr() string { return p.ln.Addr().String() }

// DropAfter makes every connection reset once n bytes have come from the
// server on it; 0 turns the fault off.
func (p *TCP) DropAfter(n int64) { p.dropAfter.Store(n) }

// Dropped returns how many connections were reset by the fault.
func (p *TCP) Dropped() int64 { return p.dropped.Load() }

// Close stops accepting and closes every connection.
func (p *TCP) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *TCP) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *TCP) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.track(client, true)
		p.track(server, true)
		p.wg.Add(2)
		go func() { // client -> server
			defer p.wg.Done()
			_, _ = io.Copy(server, client)
			_ = server.Close()
			p.track(server, false)
		}()
		go func() { // server -> client, with the drop fault
			defer p.wg.Done()
			p.pipeDown(client, server)
			_ = client.Close()
			p.track(client, false)
		}()
	}
}

func (p *TCP) pipeDown(client, server net.Conn) {
	buf := make([]byte, 32<<10)
	var sent int64
	for {
		n, err := server.Read(buf)
		if n > 0 {
			limit := p.dropAfter.Load()
			if limit > 0 && sent+int64(n) >= limit {
				_, _ = client.Write(buf[:max(0, limit-sent)])
				p.dropped.Add(1)
				if tc, ok := client.(*net.TCPConn); ok {
					_ = tc.SetLinger(0)
				}
				_ = server.Close()
				return
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
			sent += int64(n)
		}
		if err != nil {
			return
		}
	}
}
