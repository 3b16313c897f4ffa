// Package etcdtest runs etcd members in the test process
// (go.etcd.io/etcd/server/v3/embed) on 127.0.0.1, fills them with
// Kubernetes-like data, and issues TLS certificates for them.
//
// Every server is stopped, and every client closed, when the test that
// started it ends.
package etcdtest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// ReadyTimeout bounds how long Start and StartCluster wait for members to
// serve clients.
const ReadyTimeout = 30 * time.Second

// startAttempts is how often a start is tried when a port picked as free was
// taken in the meantime.
const startAttempts = 5

// Server is one etcd member running in the test process.
type Server struct {
	name      string
	dataDir   string
	clientURL url.URL
	peerURL   url.URL
	tls       *TLSFiles
	etcd      *embed.Etcd

	mu       sync.Mutex
	username string
	password string

	stopOnce sync.Once
}

// Option configures a server.
type Option func(*options)

type options struct {
	name           string
	dataDir        string
	tls            *TLSFiles
	clientCertAuth bool
	logLevel       zapcore.Level
	log            zapcore.WriteSyncer
}

// WithName names the member; the default is "etcd0" (or "etcdN" in a
// cluster).
func WithName(name string) Option { return func(o *options) { o.name = name } }

// WithDataDir starts the member on an existing data directory, for instance
// one restored from a snapshot; the member's name must match the one the
// data was restored for. The default is a new directory under tb.TempDir().
func WithDataDir(dir string) Option { return func(o *options) { o.dataDir = dir } }

// WithClientTLS serves clients over TLS with the given certificate; the
// clients returned by Server.Client present the same certificate and trust
// its CA. clientCertAuth makes the server require a client certificate
// signed by that CA; etcd then also checks that the client certificate's
// SANs match the client's address, so a certificate that Server.Client is
// to present must name 127.0.0.1 (CA.Issue's default does).
func WithClientTLS(files TLSFiles, clientCertAuth bool) Option {
	return func(o *options) { o.tls, o.clientCertAuth = &files, clientCertAuth }
}

// WithLogLevel sets the level of the server's log, written to the test's
// log (shown when the test fails or runs with -v). The default is error.
func WithLogLevel(l zapcore.Level) Option { return func(o *options) { o.logLevel = l } }

func buildOptions(tb testing.TB, opts []Option) options {
	o := options{name: "etcd0", logLevel: zapcore.ErrorLevel, log: newTestLog(tb)}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// member is what is needed to start one member of a cluster.
type member struct {
	name      string
	dataDir   string
	clientURL url.URL
	peerURL   url.URL
}

// Start starts a single-member cluster and waits until it serves clients.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	o := buildOptions(tb, opts)
	dataDir := o.dataDir
	if dataDir == "" {
		dataDir = tb.TempDir()
	}
	var lastErr error
	for range startAttempts {
		urls, err := freeURLs(2, o.tls != nil)
		if err != nil {
			tb.Fatalf("etcdtest: pick ports: %v", err)
		}
		m := member{name: o.name, dataDir: dataDir, clientURL: urls[0], peerURL: urls[1]}
		m.peerURL.Scheme = "http"
		cfg := newConfig(m, o, m.name+"="+m.peerURL.String(), embed.ClusterStateFlagNew)
		s, err := startServer(cfg, m, o)
		if isAddrInUse(err) {
			lastErr = err
			continue
		}
		if err != nil {
			tb.Fatalf("etcdtest: start %s: %v", m.name, err)
		}
		tb.Cleanup(s.Stop)
		if err := s.waitReady(); err != nil {
			tb.Fatalf("etcdtest: %v", err)
		}
		return s
	}
	tb.Fatalf("etcdtest: start %s: ports kept clashing: %v", o.name, lastErr)
	return nil
}

// StartCluster starts an n-member cluster (members "etcd0".."etcdN-1") and
// waits until every member serves clients. Options apply to every member;
// WithName and WithDataDir are ignored.
func StartCluster(tb testing.TB, n int, opts ...Option) []*Server {
	tb.Helper()
	if n < 1 {
		tb.Fatalf("etcdtest: cluster of %d members", n)
	}
	o := buildOptions(tb, opts)
	var lastErr error
	for range startAttempts {
		urls, err := freeURLs(2*n, o.tls != nil)
		if err != nil {
			tb.Fatalf("etcdtest: pick ports: %v", err)
		}
		members := make([]member, n)
		initial := make([]string, n)
		for i := range members {
			members[i] = member{
				name:      fmt.Sprintf("etcd%d", i),
				dataDir:   tb.TempDir(),
				clientURL: urls[2*i],
				peerURL:   urls[2*i+1],
			}
			members[i].peerURL.Scheme = "http"
			initial[i] = members[i].name + "=" + members[i].peerURL.String()
		}
		servers, err := startMembers(members, o, strings.Join(initial, ","), embed.ClusterStateFlagNew)
		if isAddrInUse(err) {
			lastErr = err
			continue
		}
		if err != nil {
			tb.Fatalf("etcdtest: start cluster: %v", err)
		}
		for _, s := range servers {
			tb.Cleanup(s.Stop)
		}
		for _, s := range servers {
			if err := s.waitReady(); err != nil {
				tb.Fatalf("etcdtest: %v", err)
			}
		}
		return servers
	}
	tb.Fatalf("etcdtest: start cluster: ports kept clashing: %v", lastErr)
	return nil
}

// AddLearner adds a learner (a non-voting member) to the cluster of the
// given servers, starts it and waits until it serves clients. Options are
// as for StartCluster; the learner is named "learnerN".
func AddLearner(tb testing.TB, cluster []*Server, opts ...Option) *Server {
	tb.Helper()
	o := buildOptions(tb, opts)
	cli := cluster[0].Client(tb)
	var lastErr error
	for attempt := range startAttempts {
		urls, err := freeURLs(2, o.tls != nil)
		if err != nil {
			tb.Fatalf("etcdtest: pick ports: %v", err)
		}
		m := member{
			name:      fmt.Sprintf("learner%d", attempt),
			dataDir:   tb.TempDir(),
			clientURL: urls[0],
			peerURL:   urls[1],
		}
		m.peerURL.Scheme = "http"
		ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
		resp, err := cli.MemberAddAsLearner(ctx, []string{m.peerURL.String()})
		cancel()
		if err != nil {
			tb.Fatalf("etcdtest: add learner: %v", err)
		}
		var initial []string
		for _, mem := range resp.Members {
			name := mem.Name
			if mem.ID == resp.Member.ID {
				name = m.name
			}
			for _, u := range mem.PeerURLs {
				initial = append(initial, name+"="+u)
			}
		}
		servers, err := startMembers([]member{m}, o, strings.Join(initial, ","), embed.ClusterStateFlagExisting)
		if isAddrInUse(err) {
			lastErr = err
			ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
			_, rerr := cli.MemberRemove(ctx, resp.Member.ID)
			cancel()
			if rerr != nil {
				tb.Fatalf("etcdtest: remove learner after port clash: %v", rerr)
			}
			continue
		}
		if err != nil {
			tb.Fatalf("etcdtest: start learner: %v", err)
		}
		s := servers[0]
		tb.Cleanup(s.Stop)
		if err := s.waitReady(); err != nil {
			tb.Fatalf("etcdtest: %v", err)
		}
		return s
	}
	tb.Fatalf("etcdtest: start learner: ports kept clashing: %v", lastErr)
	return nil
}

// startMembers starts every member; on error it stops those it started.
func startMembers(members []member, o options, initialCluster, state string) ([]*Server, error) {
	var servers []*Server
	for _, m := range members {
		s, err := startServer(newConfig(m, o, initialCluster, state), m, o)
		if err != nil {
			for _, s := range servers {
				s.Stop()
			}
			return nil, err
		}
		servers = append(servers, s)
	}
	return servers, nil
}

func newConfig(m member, o options, initialCluster, state string) *embed.Config {
	cfg := embed.NewConfig()
	// bcrypt's lowest cost: at etcd's default each authentication takes
	// seconds under the race detector on a busy machine, past a client's
	// dial timeout.
	cfg.BcryptCost = 4
	cfg.Name = m.name
	cfg.Dir = m.dataDir
	cfg.ListenClientUrls = []url.URL{m.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{m.clientURL}
	cfg.ListenPeerUrls = []url.URL{m.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{m.peerURL}
	cfg.InitialCluster = initialCluster
	cfg.InitialClusterToken = "etcdtest"
	cfg.ClusterState = state
	cfg.UnsafeNoFsync = true // tests need no durability, and fsync is slow on shared disks
	cfg.TickMs = 50
	cfg.ElectionMs = 500
	// Adding a member otherwise waits until every peer has been connected
	// for five seconds.
	cfg.StrictReconfigCheck = false
	if o.tls != nil {
		cfg.ClientTLSInfo = o.tls.TLSInfo()
		cfg.ClientTLSInfo.ClientCertAuth = o.clientCertAuth
	}
	enc := zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
	lg := zap.New(zapcore.NewCore(enc, o.log, o.logLevel))
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg.Named(m.name))
	return cfg
}

// testLog writes a server's log to the test's log, which shows only when the
// test fails or runs with -v. It drops what is written after the test ends:
// the testing package forbids logging then.
type testLog struct {
	mu   sync.Mutex
	tb   testing.TB
	done bool
}

// newTestLog returns a log for tb that stops at tb's cleanup. Register it
// before the servers' own cleanup, so that it outlives them.
func newTestLog(tb testing.TB) *testLog {
	l := &testLog{tb: tb}
	tb.Cleanup(func() {
		l.mu.Lock()
		l.done = true
		l.mu.Unlock()
	})
	return l
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.tb.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (l *testLog) Sync() error { return nil }

func startServer(cfg *embed.Config, m member, o options) (*Server, error) {
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	return &Server{
		name:      m.name,
		dataDir:   m.dataDir,
		clientURL: m.clientURL,
		peerURL:   m.peerURL,
		tls:       o.tls,
		etcd:      e,
	}, nil
}

func (s *Server) waitReady() error {
	select {
	case <-s.etcd.Server.ReadyNotify():
		return nil
	case err := <-s.etcd.Err():
		return fmt.Errorf("%s stopped before it was ready: %w", s.name, err)
	case <-s.etcd.Server.StopNotify():
		return fmt.Errorf("%s stopped before it was ready", s.name)
	case <-time.After(ReadyTimeout):
		return fmt.Errorf("%s not ready after %v", s.name, ReadyTimeout)
	}
}

// freeURLs returns n URLs on 127.0.0.1 ports that were free a moment ago.
// All listeners are open at once, so the n ports differ; another process
// may still take one before etcd binds it, which callers retry.
func freeURLs(n int, secure bool) ([]url.URL, error) {
	scheme := "http"
	if secure {
		scheme = "https"
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	urls := make([]url.URL, n)
	for i := range urls {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		urls[i] = url.URL{Scheme: scheme, Host: l.Addr().String()}
	}
	return urls, nil
}

func isAddrInUse(err error) bool {
	return err != nil && (errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use"))
}

// Name returns the member's name.
func (s *Server) Name() string { return s.name }

// ID returns the member's ID.
func (s *Server) ID() uint64 { return uint64(s.etcd.Server.MemberID()) }

// IsLeader reports whether the member is the cluster's leader now.
func (s *Server) IsLeader() bool { return s.etcd.Server.Leader() == s.etcd.Server.MemberID() }

// Endpoints returns the member's client URL.
func (s *Server) Endpoints() []string { return []string{s.clientURL.String()} }

// PeerURL returns the member's peer URL.
func (s *Server) PeerURL() string { return s.peerURL.String() }

// DataDir returns the member's data directory.
func (s *Server) DataDir() string { return s.dataDir }

// TLS returns the member's client TLS files, nil when it serves plain HTTP.
func (s *Server) TLS() *TLSFiles { return s.tls }

// WaitStorageVersion waits until the member has recorded its storage schema
// version in its backend and returns it. A new cluster records it only after
// its cluster version is decided, which etcd's version monitor may leave for
// up to four seconds after the start; snapshots taken before that carry none.
func (s *Server) WaitStorageVersion(tb testing.TB) string {
	tb.Helper()
	deadline := time.Now().Add(ReadyTimeout)
	for {
		if v := schema.ReadStorageVersion(s.etcd.Server.Backend().ReadTx()); v != nil {
			return v.String()
		}
		if time.Now().After(deadline) {
			tb.Fatalf("etcd member %s recorded no storage version within %v", s.name, ReadyTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Etcd returns the embedded server, for what this package does not wrap.
func (s *Server) Etcd() *embed.Etcd { return s.etcd }

// Client returns a client bound to this member alone, authenticated when
// EnableAuth was called, and closed when the test ends.
func (s *Server) Client(tb testing.TB) *clientv3.Client {
	tb.Helper()
	cfg := clientv3.Config{
		Endpoints:   s.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	}
	s.mu.Lock()
	cfg.Username, cfg.Password = s.username, s.password
	s.mu.Unlock()
	if s.tls != nil {
		tc, err := s.tls.TLSInfo().ClientConfig()
		if err != nil {
			tb.Fatalf("etcdtest: client tls: %v", err)
		}
		cfg.TLS = tc
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		tb.Fatalf("etcdtest: client of %s: %v", s.name, err)
	}
	tb.Cleanup(func() { _ = cli.Close() })
	return cli
}

// ClientTLS returns the tls.Config Client uses, nil when the member serves
// plain HTTP.
func (s *Server) ClientTLS(tb testing.TB) *tls.Config {
	tb.Helper()
	if s.tls == nil {
		return nil
	}
	tc, err := s.tls.TLSInfo().ClientConfig()
	if err != nil {
		tb.Fatalf("etcdtest: client tls: %v", err)
	}
	return tc
}

// Stop stops the member and waits until it has. It may be called more than
// once; the test's cleanup calls it too.
func (s *Server) Stop() {
	s.stopOnce.Do(func() { s.etcd.Close() })
}

// EnableAuth creates the user "root" with the given password and the root
// role, and turns authentication on for the whole cluster; the clients the
// given servers return afterwards authenticate as root.
func EnableAuth(tb testing.TB, password string, servers ...*Server) {
	tb.Helper()
	if len(servers) == 0 {
		tb.Fatalf("etcdtest: EnableAuth without servers")
	}
	cli := servers[0].Client(tb)
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	if _, err := cli.UserAdd(ctx, "root", password); err != nil {
		tb.Fatalf("etcdtest: add root user: %v", err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		tb.Fatalf("etcdtest: grant root role: %v", err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		tb.Fatalf("etcdtest: enable auth: %v", err)
	}
	for _, s := range servers {
		s.mu.Lock()
		s.username, s.password = "root", password
		s.mu.Unlock()
	}
}

// Endpoints returns the client URLs of the given servers.
func Endpoints(servers ...*Server) []string {
	var eps []string
	for _, s := range servers {
		eps = append(eps, s.Endpoints()...)
	}
	return eps
}

// Leader returns the server that is the cluster's leader now, waiting up to
// ReadyTimeout for one to be elected.
func Leader(tb testing.TB, servers []*Server) *Server {
	tb.Helper()
	deadline := time.Now().Add(ReadyTimeout)
	for time.Now().Before(deadline) {
		for _, s := range servers {
			if s.IsLeader() {
				return s
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatalf("etcdtest: no leader after %v", ReadyTimeout)
	return nil
}
