package backup

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/etcdbackup/etcdbackup/internal/zapslog"
)

// DefaultDialTimeout is used when EtcdConfig.DialTimeout is zero.
const DefaultDialTimeout = 5 * time.Second

// ErrNoMember is matched by the error of a snapshot for which no member
// could be reached; it wraps the error of every endpoint.
var ErrNoMember = errors.New("no etcd member available")

// ErrMemberNotCurrent is matched by the error of a snapshot for which
// every member that answered was refused as not current: it knew no
// leader (it is cut off from the cluster's majority, and its data may be
// arbitrarily old), or it was more than EtcdConfig.MaxRevisionLag
// revisions behind the leader. A snapshot of such a member would be
// stored as fresh while it is not. It is also matched when the member
// chosen lost its leader before its snapshot started and knew none again
// within a few seconds: a momentary election, after the leader's
// failure, is waited for.
var ErrMemberNotCurrent = errors.New("etcd member has no leader or is behind its leader")

// DefaultMaxRevisionLag is the bound of EtcdConfig.MaxRevisionLag when it
// is zero.
const DefaultMaxRevisionLag = 1000

// MemberChoice tells the etcd snapshotter which member to snapshot.
type MemberChoice int

const (
	// HighestApplied, the default, snapshots the member with the highest
	// applied raft index: the freshest data. Among equals a follower is
	// preferred to a learner and a learner to the leader.
	HighestApplied MemberChoice = iota
	// PreferNonLeader snapshots a follower or learner (the one with the
	// highest applied raft index) to spare the leader the disk and network
	// load of the snapshot. The leader is chosen only if no other member
	// answers.
	PreferNonLeader
)

// String names the choice as in configuration.
func (c MemberChoice) String() string {
	switch c {
	case HighestApplied:
		return "highest-applied"
	case PreferNonLeader:
		return "prefer-non-leader"
	default:
		return fmt.Sprintf("MemberChoice(%d)", int(c))
	}
}

// EtcdConfig configures an EtcdSnapshotter. The zero value of each field is
// documented; Endpoints is the only field required.
type EtcdConfig struct {
	// Endpoints are the client URLs of the cluster's members
	// ("https://10.0.0.1:2379", or "host:port"). Each is asked for its
	// status and the chosen one is snapshotted through a connection to it
	// alone. One URL per member gives the choice its meaning.
	Endpoints []string

	// TLS configures client TLS: TrustedCAFile, CertFile and KeyFile (for
	// client certificate authentication) and ServerName (to verify a server
	// certificate issued for another name than the endpoint's host). Files
	// are read at each snapshot, so rotated certificates are picked up. Nil
	// means plain connections, or the system's roots for https endpoints.
	TLS *transport.TLSInfo

	// Username and Password authenticate with etcd's auth; both or neither.
	// Taking a snapshot needs the root role. The password never appears in
	// an error, a log or String.
	Username string
	Password string

	// DialTimeout bounds connecting, authenticating and each status request
	// to one member. Zero means DefaultDialTimeout.
	DialTimeout time.Duration

	// Member chooses the member to snapshot. The zero value is
	// HighestApplied.
	Member MemberChoice

	// MaxRevisionLag refuses a member whose revision is more than this
	// many revisions behind its leader's, both as they answered the
	// status requests that precede the choice; a member that knows no
	// leader is always refused (ErrMemberNotCurrent). The lag is measured
	// only when the leader answered too. Zero means DefaultMaxRevisionLag;
	// a negative value means no bound.
	MaxRevisionLag int64

	// Logger receives what the snapshotter and the etcd client have to say
	// (the client's warnings and errors only). Nil means silent.
	Logger *slog.Logger
}

// Validate checks the configuration without connecting.
func (c EtcdConfig) Validate() error {
	if len(c.Endpoints) == 0 {
		return errors.New("etcd config: no endpoints")
	}
	seen := make(map[string]bool, len(c.Endpoints))
	for _, ep := range c.Endpoints {
		if err := validateEndpoint(ep); err != nil {
			return fmt.Errorf("etcd config: %w", err)
		}
		if seen[ep] {
			return fmt.Errorf("etcd config: endpoint %q given twice", ep)
		}
		seen[ep] = true
	}
	if (c.Username == "") != (c.Password == "") {
		return errors.New("etcd config: username and password must be set together")
	}
	if c.DialTimeout < 0 {
		return fmt.Errorf("etcd config: negative dial timeout %v", c.DialTimeout)
	}
	if c.Member != HighestApplied && c.Member != PreferNonLeader {
		return fmt.Errorf("etcd config: unknown member choice %v", c.Member)
	}
	if c.TLS != nil && (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		return errors.New("etcd config: tls cert file and key file must be set together")
	}
	return nil
}

func validateEndpoint(ep string) error {
	if ep == "" || strings.TrimSpace(ep) != ep || strings.ContainsAny(ep, " \t\r\n") {
		return fmt.Errorf("invalid endpoint %q", redactEndpoint(ep))
	}
	if strings.Contains(ep, "@") {
		return fmt.Errorf("invalid endpoint %q: credentials in the url; use Username and Password", redactEndpoint(ep))
	}
	if !strings.Contains(ep, "://") {
		return nil // host:port, as etcdctl accepts
	}
	u, err := url.Parse(ep)
	if err != nil {
		return fmt.Errorf("invalid endpoint %q: not a url", ep) // url's error repeats the url
	}
	switch u.Scheme {
	case "http", "https", "unix", "unixs":
	default:
		return fmt.Errorf("invalid endpoint %q: scheme %q is not http, https, unix or unixs", ep, u.Scheme)
	}
	if u.Host == "" && u.Path == "" {
		return fmt.Errorf("invalid endpoint %q: no host", ep)
	}
	return nil
}

// redactEndpoint hides what may be credentials in an endpoint that is to
// appear in an error: everything before an "@".
func redactEndpoint(ep string) string {
	at := strings.LastIndex(ep, "@")
	if at < 0 {
		return ep
	}
	if scheme := strings.Index(ep, "://"); scheme >= 0 && scheme < at {
		return ep[:scheme+3] + "REDACTED@" + ep[at+1:]
	}
	return "REDACTED@" + ep[at+1:]
}

// String describes the configuration with the password redacted.
func (c EtcdConfig) String() string {
	pw := ""
	if c.Password != "" {
		pw = "REDACTED"
	}
	tlsDesc := "off"
	if c.TLS != nil {
		tlsDesc = fmt.Sprintf("{CA: %q, Cert: %q, Key: %q, ServerName: %q}",
			c.TLS.TrustedCAFile, c.TLS.CertFile, c.TLS.KeyFile, c.TLS.ServerName)
	}
	return fmt.Sprintf("EtcdConfig{Endpoints: %q, TLS: %s, Username: %q, Password: %q, DialTimeout: %v, Member: %v}",
		c.Endpoints, tlsDesc, c.Username, pw, c.DialTimeout, c.Member)
}

// GoString is String, so that %#v does not print the password either.
func (c EtcdConfig) GoString() string { return c.String() }

// LogValue logs the configuration without the password.
func (c EtcdConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Any("endpoints", c.Endpoints),
		slog.Bool("tls", c.TLS != nil),
		slog.String("username", c.Username),
		slog.Duration("dial_timeout", c.DialTimeout),
		slog.String("member", c.Member.String()),
	)
}

func (c EtcdConfig) maxRevisionLag() int64 {
	if c.MaxRevisionLag == 0 {
		return DefaultMaxRevisionLag
	}
	return c.MaxRevisionLag
}

func (c EtcdConfig) dialTimeout() time.Duration {
	if c.DialTimeout == 0 {
		return DefaultDialTimeout
	}
	return c.DialTimeout
}

// EtcdSnapshotter takes snapshots of an etcd cluster through
// Maintenance.Snapshot: at each Snapshot it asks every endpoint for its
// status, chooses a member (EtcdConfig.Member) and streams the snapshot
// from it alone. It is safe for concurrent use.
type EtcdSnapshotter struct {
	cfg EtcdConfig
	log *slog.Logger
}

// String describes the snapshotter by its configuration, password
// redacted: fmt would otherwise print the unexported fields as they are.
func (s *EtcdSnapshotter) String() string { return "EtcdSnapshotter" + s.cfg.String() }

// GoString is String, so that %#v does not print the password either.
func (s *EtcdSnapshotter) GoString() string { return s.String() }

var _ Snapshotter = (*EtcdSnapshotter)(nil)

// NewEtcdSnapshotter validates cfg and returns a snapshotter. It does not
// connect; it loads the TLS files once to report a bad one early.
func NewEtcdSnapshotter(cfg EtcdConfig) (*EtcdSnapshotter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Endpoints = slices.Clone(cfg.Endpoints)
	if cfg.TLS != nil {
		info := *cfg.TLS
		cfg.TLS = &info
	}
	s := &EtcdSnapshotter{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if _, err := s.tlsConfig(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *EtcdSnapshotter) tlsConfig() (*tls.Config, error) {
	if s.cfg.TLS == nil {
		return nil, nil
	}
	c, err := s.cfg.TLS.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd client tls: %w", err)
	}
	return c, nil
}

// memberConn is a client bound to one endpoint, and what the member there
// said.
type memberConn struct {
	index    int // position in EtcdConfig.Endpoints
	endpoint string
	cli      *clientv3.Client
	remote   pb.MaintenanceClient // over cli's single connection
	status   *pb.StatusResponse
	err      error
}

func (m *memberConn) id() uint64    { return m.status.Header.MemberId }
func (m *memberConn) leader() bool  { return m.status.Leader == m.status.Header.MemberId }
func (m *memberConn) healthy() bool { return len(m.status.Errors) == 0 }
func (m *memberConn) learner() bool { return m.status.IsLearner }
func (m *memberConn) close()        { _ = m.cli.Close() }

// Snapshot chooses a member and opens its snapshot stream. ctx governs the
// whole stream: cancelling it makes further reads fail.
func (s *EtcdSnapshotter) Snapshot(ctx context.Context) (*Snapshot, error) {
	tlsCfg, err := s.tlsConfig()
	if err != nil {
		return nil, err
	}
	members := s.probe(ctx, tlsCfg)
	closeAll := func(except *memberConn) {
		for _, m := range members {
			if m != except && m.cli != nil {
				m.close()
			}
		}
	}
	chosen, err := chooseMember(members, s.cfg.Member, s.cfg.maxRevisionLag())
	if err != nil {
		closeAll(nil)
		return nil, err
	}
	name := s.memberName(ctx, members, chosen.id())
	var leader *pb.StatusResponse
	for _, m := range members {
		if m.err == nil && m.id() == chosen.status.Leader {
			leader = m.status
		}
	}
	closeAll(chosen)

	snap, err := s.open(ctx, chosen, name, leader)
	if err != nil {
		chosen.close()
		return nil, err
	}
	return snap, nil
}

// probe connects to every endpoint concurrently and asks for its status.
func (s *EtcdSnapshotter) probe(ctx context.Context, tlsCfg *tls.Config) []*memberConn {
	members := make([]*memberConn, len(s.cfg.Endpoints))
	var wg sync.WaitGroup
	for i, ep := range s.cfg.Endpoints {
		m := &memberConn{index: i, endpoint: ep}
		members[i] = m
		wg.Go(func() {
			m.cli, m.err = s.connect(ctx, ep, tlsCfg)
			if m.err != nil {
				m.err = fmt.Errorf("endpoint %s: connect: %w", ep, m.err)
				return
			}
			m.remote = clientv3.RetryMaintenanceClient(m.cli, m.cli.ActiveConnection())
			m.status, m.err = s.status(ctx, m)
			if m.err != nil {
				m.err = fmt.Errorf("endpoint %s: status: %w", ep, m.err)
			}
		})
	}
	wg.Wait()
	for _, m := range members {
		if m.err != nil {
			s.log.WarnContext(ctx, "etcd member unavailable", "endpoint", m.endpoint, "error", m.err)
		}
	}
	return members
}

// connect returns a client bound to ep alone: a client given several
// endpoints lets its balancer pick one per request, and the snapshot must
// come from the member that was chosen.
func (s *EtcdSnapshotter) connect(ctx context.Context, ep string, tlsCfg *tls.Config) (*clientv3.Client, error) {
	return s.dial(ctx, []string{ep}, tlsCfg)
}

// Client returns a client of every endpoint of the cluster, with the
// snapshotter's TLS and credentials, for what reads the cluster through
// its API rather than a snapshot: a Follower, a KeysExporter. ctx bounds
// the client's life; the caller closes it.
//
// Its gRPC flow-control windows are fixed at ExportWindow
// (ExportDialOptions). gRPC otherwise estimates the link's bandwidth by
// pinging etcd after each message it receives once the last ping was
// answered (for a watch of small revisions, after nearly every one: ten
// thousand pings a second, and as many answers from etcd, for a thousand
// followers of clusters written ten times a second), and lets the windows
// grow to 16 MiB, which a stalled reader then holds. A fixed window bounds
// a watch or an export to a window per round trip: 1 MiB, 10 MiB/s at
// 100 ms.
func (s *EtcdSnapshotter) Client(ctx context.Context) (*clientv3.Client, error) {
	tlsCfg, err := s.tlsConfig()
	if err != nil {
		return nil, err
	}
	cli, err := s.dial(ctx, s.cfg.Endpoints, tlsCfg, ExportDialOptions()...)
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return cli, nil
}

// dial returns a client of endpoints with the snapshotter's TLS and
// credentials, and opts.
func (s *EtcdSnapshotter) dial(ctx context.Context, endpoints []string, tlsCfg *tls.Config, opts ...grpc.DialOption) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:            endpoints,
		TLS:                  tlsCfg,
		Username:             s.cfg.Username,
		Password:             s.cfg.Password,
		DialTimeout:          s.cfg.dialTimeout(),
		DialKeepAliveTime:    30 * time.Second,
		DialKeepAliveTimeout: 10 * time.Second,
		Context:              ctx,
		Logger:               zapslog.New(s.cfg.Logger),
	}
	if tlsCfg != nil && tlsCfg.ServerName != "" {
		// gRPC's TLS credentials replace tls.Config.ServerName with the
		// connection's authority, which the etcd client sets to the
		// endpoint's host: without this the configured name is ignored.
		// The client appends DialOptions last, so these credentials win.
		opts = append(opts, grpc.WithTransportCredentials(
			fixedServerName{TransportCredentials: credentials.NewTLS(tlsCfg), name: tlsCfg.ServerName}))
	}
	cfg.DialOptions = opts
	return clientv3.New(cfg)
}

// fixedServerName verifies the server's certificate against name whatever
// address it dials.
type fixedServerName struct {
	credentials.TransportCredentials
	name string
}

func (f fixedServerName) ClientHandshake(ctx context.Context, _ string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return f.TransportCredentials.ClientHandshake(ctx, f.name, conn)
}

func (f fixedServerName) Clone() credentials.TransportCredentials {
	return fixedServerName{TransportCredentials: f.TransportCredentials.Clone(), name: f.name}
}

// status asks the member behind m's own connection (not a new one, so that
// an endpoint in front of several members cannot answer for another).
//
// It calls the gRPC client directly because the etcd client's Status turns
// every error on an expired context into the context's error, which would
// hide why the member could not be reached (a TLS handshake refused, a
// connection refused) behind "context deadline exceeded".
func (s *EtcdSnapshotter) status(ctx context.Context, m *memberConn) (*pb.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.dialTimeout())
	defer cancel()
	st, err := m.remote.Status(ctx, &pb.StatusRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return nil, rpctypes.Error(err)
	}
	if st.Header == nil {
		return nil, errors.New("status response without header")
	}
	return st, nil
}

// memberName reads the member list from a voting member that answered,
// chosen first. A learner cannot serve it. A failure leaves the name empty.
func (s *EtcdSnapshotter) memberName(ctx context.Context, members []*memberConn, id uint64) string {
	order := slices.Clone(members)
	slices.SortStableFunc(order, func(a, b *memberConn) int {
		return cmp.Compare(boolRank(a.err != nil || a.id() != id), boolRank(b.err != nil || b.id() != id))
	})
	for _, m := range order {
		if m.err != nil || m.learner() {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, s.cfg.dialTimeout())
		resp, err := m.cli.MemberList(lctx, clientv3.WithSerializable())
		cancel()
		if err != nil {
			s.log.WarnContext(ctx, "etcd member list unavailable", "endpoint", m.endpoint, "error", err)
			continue
		}
		for _, mem := range resp.Members {
			if mem.ID == id {
				return mem.Name
			}
		}
		return ""
	}
	return ""
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// chooseMember picks the member to snapshot among those that answered,
// after refusing those that are not current (refuseStale). Members
// reporting errors (alarms) come last; see MemberChoice for the rest of
// the order.
func chooseMember(members []*memberConn, choice MemberChoice, maxLag int64) (*memberConn, error) {
	var ok []*memberConn
	var errs []error
	seen := map[uint64]bool{}
	for _, m := range members {
		switch {
		case m.err != nil:
			errs = append(errs, m.err)
		case !seen[m.id()]: // several endpoints may reach one member
			seen[m.id()] = true
			ok = append(ok, m)
		}
	}
	if len(ok) == 0 {
		if len(errs) == 0 {
			return nil, ErrNoMember
		}
		return nil, fmt.Errorf("%w: %w", ErrNoMember, endpointErrors(errs))
	}
	ok, refused := refuseStale(ok, maxLag)
	if len(ok) == 0 {
		return nil, fmt.Errorf("%w: %w", ErrMemberNotCurrent, endpointErrors(append(refused, errs...)))
	}
	role := func(m *memberConn) int {
		switch {
		case m.leader():
			return 2
		case m.learner():
			return 1
		default:
			return 0
		}
	}
	slices.SortStableFunc(ok, func(a, b *memberConn) int {
		if c := cmp.Compare(boolRank(!a.healthy()), boolRank(!b.healthy())); c != 0 {
			return c
		}
		if choice == PreferNonLeader {
			if c := cmp.Compare(boolRank(a.leader()), boolRank(b.leader())); c != 0 {
				return c
			}
		}
		if c := cmp.Compare(b.status.RaftAppliedIndex, a.status.RaftAppliedIndex); c != 0 {
			return c
		}
		if c := cmp.Compare(role(a), role(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.index, b.index)
	})
	return ok[0], nil
}

// refuseStale splits the members that answered into those current enough
// to snapshot and the reasons the others were refused: a member that knows
// no leader, or one more than maxLag revisions behind its leader (when
// the leader answered too, and maxLag is not negative).
func refuseStale(members []*memberConn, maxLag int64) (current []*memberConn, refused []error) {
	byID := make(map[uint64]*memberConn, len(members))
	for _, m := range members {
		byID[m.id()] = m
	}
	for _, m := range members {
		if m.status.Leader == 0 {
			refused = append(refused, fmt.Errorf("endpoint %s: member %x knows no leader", m.endpoint, m.id()))
			continue
		}
		if l := byID[m.status.Leader]; l != nil && maxLag >= 0 {
			if lag := l.status.Header.Revision - m.status.Header.Revision; lag > maxLag {
				refused = append(refused, fmt.Errorf("endpoint %s: member %x is %d revisions behind its leader (at most %d)",
					m.endpoint, m.id(), lag, maxLag))
				continue
			}
		}
		current = append(current, m)
	}
	return current, refused
}

// endpointErrors joins the errors of several endpoints on one line.
type endpointErrors []error

func (e endpointErrors) Error() string {
	parts := make([]string, len(e))
	for i, err := range e {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

func (e endpointErrors) Unwrap() []error { return e }

// open takes the lower revision bound and opens the snapshot stream of the
// chosen member.
func (s *EtcdSnapshotter) open(ctx context.Context, m *memberConn, name string, leader *pb.StatusResponse) (*Snapshot, error) {
	before, err := s.statusWithLeader(ctx, m)
	if err != nil {
		return nil, err
	}
	if before.Leader == 0 {
		return nil, fmt.Errorf("etcd member %s: %w: member %x lost its leader before its snapshot started, and knew none %s later",
			m.endpoint, ErrMemberNotCurrent, m.id(), leaderWait)
	}
	info := SnapshotInfo{
		Endpoint:         m.endpoint,
		MemberID:         m.id(),
		MemberName:       name,
		ClusterID:        before.Header.ClusterId,
		EtcdVersion:      before.Version,
		Leader:           before.Leader == before.Header.MemberId,
		Learner:          before.IsLearner,
		RaftAppliedIndex: before.RaftAppliedIndex,
		DBSize:           before.DbSize,
		DBSizeInUse:      before.DbSizeInUse,
		RevisionLow:      before.Header.Revision,
		Started:          time.Now(),
		LeaderID:         before.Leader,
		Healthy:          len(before.Errors) == 0,
	}
	if leader != nil && leader.Header.MemberId == before.Leader {
		// Of the same leader only: another was elected meanwhile.
		info.LeaderAppliedIndex, info.LeaderRevision = leader.RaftAppliedIndex, leader.Header.Revision
	}

	sctx, cancel := context.WithCancel(ctx)
	blobs, err := openSnapshot(sctx, m.remote)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("etcd member %s: open snapshot: %w", m.endpoint, err)
	}
	info.StorageVersion = blobs.version
	s.log.InfoContext(ctx, "etcd snapshot started",
		"endpoint", m.endpoint, "member", fmt.Sprintf("%x", info.MemberID), "name", name,
		"leader", info.Leader, "learner", info.Learner, "applied_index", info.RaftAppliedIndex,
		"revision_low", info.RevisionLow, "db_size", info.DBSize)

	stream := &etcdStream{rc: blobs, endpoint: m.endpoint, cancel: cancel, member: m}
	finish := func(info SnapshotInfo) (SnapshotInfo, error) {
		return s.finish(sctx, m, info)
	}
	return NewSnapshot(stream, info, finish), nil
}

// leaderWait bounds how long open waits for the chosen member to know a
// leader again, and leaderProbe is its first pause between statuses:
// after a leader's failure, the others elect a new one within one to two
// election timeouts (one second each by default).
var (
	leaderWait  = 3 * time.Second
	leaderProbe = 100 * time.Millisecond
)

// statusWithLeader asks m for its status again at open. The member was
// chosen from statuses taken moments ago: it may have lost its leader
// since, and a snapshot from then on would hold data of unknown age (it
// may be cut off from the majority). A momentary election is waited for,
// up to leaderWait; the status returned then may still have no leader.
func (s *EtcdSnapshotter) statusWithLeader(ctx context.Context, m *memberConn) (*pb.StatusResponse, error) {
	deadline := time.Now().Add(leaderWait)
	pause := leaderProbe
	for {
		st, err := s.status(ctx, m)
		if err != nil {
			return nil, fmt.Errorf("etcd member %s: status: %w", m.endpoint, err)
		}
		if st.Header.MemberId != m.id() {
			return nil, fmt.Errorf("etcd endpoint %s answered as member %x, then as %x; give one endpoint per member",
				m.endpoint, m.id(), st.Header.MemberId)
		}
		if st.Leader != 0 || time.Now().Add(pause).After(deadline) {
			return st, nil
		}
		s.log.DebugContext(ctx, "etcd member knows no leader: waiting for an election", "endpoint", m.endpoint, "pause", pause)
		timer := time.NewTimer(pause)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("etcd member %s: wait for a leader: %w", m.endpoint, context.Cause(ctx))
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// finish takes the upper revision bound once the stream has ended.
func (s *EtcdSnapshotter) finish(ctx context.Context, m *memberConn, info SnapshotInfo) (SnapshotInfo, error) {
	after, err := s.status(ctx, m)
	switch {
	case err != nil:
		// The snapshot is whole and verified; only the upper bound is lost.
		s.log.WarnContext(ctx, "etcd snapshot revision upper bound unknown",
			"endpoint", m.endpoint, "error", err)
	case after.Header.MemberId != info.MemberID:
		return info, fmt.Errorf("etcd endpoint %s answered as member %x after the snapshot of member %x; give one endpoint per member",
			m.endpoint, after.Header.MemberId, info.MemberID)
	default:
		info.RevisionHigh = after.Header.Revision
	}
	s.log.InfoContext(ctx, "etcd snapshot completed",
		"endpoint", m.endpoint, "member", fmt.Sprintf("%x", info.MemberID), "bytes", info.Size,
		"revision_low", info.RevisionLow, "revision_high", info.RevisionHigh,
		"duration", info.Finished.Sub(info.Started))
	return info, nil
}

// etcdStream is the raw snapshot stream of one member; closing it closes
// the stream and the member's client.
type etcdStream struct {
	rc       io.ReadCloser
	endpoint string
	cancel   context.CancelFunc
	member   *memberConn
	once     sync.Once
}

func (e *etcdStream) Read(p []byte) (int, error) {
	n, err := e.rc.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("read etcd snapshot from %s: %w", e.endpoint, err)
	}
	return n, err
}

func (e *etcdStream) Close() error {
	e.once.Do(func() {
		_ = e.rc.Close()
		e.cancel()
		e.member.close()
	})
	return nil
}
