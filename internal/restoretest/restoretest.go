package restoretest

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// ReadyTimeout bounds how long StartMembers waits for the members to serve
// clients.
const ReadyTimeout = 30 * time.Second

// FreeURLs returns n distinct "http://127.0.0.1:PORT" URLs on ports that
// were free a moment ago.
func FreeURLs(tb testing.TB, n int) []string {
	tb.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	urls := make([]string, n)
	for i := range urls {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatalf("restoretest: pick a port: %v", err)
		}
		ls = append(ls, l)
		urls[i] = "http://" + l.Addr().String()
	}
	return urls
}

// Member is a restored member to start.
type Member struct {
	Name string
	// DataDir was restored for Name and PeerURL.
	DataDir string
	// PeerURL is the peer URL the member was restored with.
	PeerURL string
	// ClientURL is where it serves clients.
	ClientURL string
}

// StartMembers starts every member and waits until each serves clients.
// They are stopped when the test ends.
func StartMembers(tb testing.TB, members []Member) []*embed.Etcd {
	tb.Helper()
	initial := make([]string, len(members))
	for i, m := range members {
		initial[i] = m.Name + "=" + m.PeerURL
	}
	var started []*embed.Etcd
	for _, m := range members {
		cfg := embed.NewConfig()
		cfg.Name = m.Name
		cfg.Dir = m.DataDir
		peer, client := mustURL(tb, m.PeerURL), mustURL(tb, m.ClientURL)
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		// A restored data directory holds its cluster; these only have to
		// be consistent.
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.ClusterState = embed.ClusterStateFlagNew
		cfg.UnsafeNoFsync = true
		cfg.TickMs, cfg.ElectionMs = 50, 500
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			tb.Fatalf("restoretest: start %s: %v", m.Name, err)
		}
		tb.Cleanup(e.Close)
		started = append(started, e)
	}
	for i, e := range started {
		select {
		case <-e.Server.ReadyNotify():
		case err := <-e.Err():
			tb.Fatalf("restoretest: %s stopped: %v", members[i].Name, err)
		case <-time.After(ReadyTimeout):
			tb.Fatalf("restoretest: %s not ready after %v", members[i].Name, ReadyTimeout)
		}
	}
	return started
}

// Client returns a client of the given endpoints, closed when the test
// ends.
func Client(tb testing.TB, endpoints ...string) *clientv3.Client {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		tb.Fatalf("restoretest: client: %v", err)
	}
	tb.Cleanup(func() { _ = cli.Close() })
	return cli
}

func mustURL(tb testing.TB, s string) url.URL {
	tb.Helper()
	u, err := url.Parse(s)
	if err != nil {
		tb.Fatalf("restoretest: %v", fmt.Errorf("parse %q: %w", s, err))
	}
	return *u
}
