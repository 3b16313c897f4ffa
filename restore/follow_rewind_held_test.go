package restore_test

import (
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

type switchProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	conns  []net.Conn
}

func startSwitchProxy(t *testing.T, target string) *switchProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &switchProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.switchTo("") })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			tgt := p.target
			p.mu.Unlock()
			u, err := net.Dial("tcp", tgt)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	return p
}

func (p *switchProxy) switchTo(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func hostOf(t *testing.T, endpoint string) string {
	u, err := url.Parse(endpoint)
	require.NoError(t, err)
	return u.Host
}

// The watch breaks (no leader) while the segment builder holds revisions;
// the cluster then comes back as another history: the revisions held are
// stored to the old chain, and the new chain starts with an empty segment
// (before, it kept the old revisions and every new one was refused).
func TestFollowerRewindWithHeldRevisionsStartsCleanChain(t *testing.T) {
	members := etcdtest.StartCluster(t, 3)
	var m0 *etcdtest.Server
	for _, m := range members {
		if m.IsLeader() {
			continue
		}
		m0 = m
		break
	}
	px := startSwitchProxy(t, hostOf(t, m0.Endpoints()[0]))
	ep := "http://" + px.ln.Addr().String()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { cli.Close() })
	direct := m0.Client(t)

	b := memBucket(t)
	rec := &followEvents{}
	snap, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: []string{ep}})
	require.NoError(t, err)
	f := &backup.Follower{
		Client: cli, Pipeline: &backup.Pipeline{Snapshotter: snap}, Cluster: "prod-a",
		Targets:       []backup.Target{{Destination: "mem", Uploader: &backup.BucketUploader{Bucket: b}}},
		Catalogs:      []backup.Catalog{b},
		FlushInterval: time.Hour, RetryInterval: 100 * time.Millisecond, Observer: rec,
	}
	stop := runFollower(t, f)
	require.Eventually(t, func() bool { return rec.count(backup.ChainStarted) == 1 }, 30*time.Second, 10*time.Millisecond)
	for i := range 50 {
		_, err := direct.Put(t.Context(), "/old/"+strings.Repeat("x", i%5+1), "o")
		require.NoError(t, err)
	}
	// lose quorum: m0 alone, no leader: the watch (WithRequireLeader) ends
	for _, m := range members {
		if m != m0 {
			m.Stop()
		}
	}
	require.Eventually(t, func() bool { return rec.count(backup.WatchRestarted) >= 1 }, 30*time.Second, 20*time.Millisecond, "watch ended")
	// another history behind the same endpoint
	other := etcdtest.Start(t)
	oc := other.Client(t)
	for i := range 5 {
		_, err := oc.Put(t.Context(), "/new/"+strings.Repeat("y", i+1), "n")
		require.NoError(t, err)
	}
	px.switchTo(hostOf(t, other.Endpoints()[0]))
	require.Eventually(t, func() bool { return rec.count(backup.ChainRewound) >= 1 && rec.count(backup.ChainStarted) >= 2 }, 30*time.Second, 20*time.Millisecond)
	var last int64
	for i := range 5 {
		r, err := oc.Put(t.Context(), "/new/after", string(rune('a'+i)))
		require.NoError(t, err)
		last = r.Header.Revision
	}
	// The follower's last store holds the new chain's revisions: the
	// segment it holds took them.
	require.NoError(t, stop())
	rec.mu.Lock()
	var restarts []string
	var newChain string
	var newStart, newCommitted int64
	for _, e := range rec.events {
		switch {
		case e.Kind == backup.WatchRestarted && e.Err != nil:
			restarts = append(restarts, e.Err.Error())
		case e.Kind == backup.ChainStarted:
			newChain, newStart = e.Chain, e.Revision
		case e.Kind == backup.SegmentCommitted && e.Chain == newChain:
			require.GreaterOrEqual(t, e.Revision, newStart, "a segment of the new chain holds revisions of the old history")
			newCommitted = max(newCommitted, e.Committed)
		}
	}
	rec.mu.Unlock()
	t.Logf("other cluster at %d; watch restarts: %v", last, restarts)
	require.Less(t, len(restarts), 5, "follower spins on the new chain")
	require.GreaterOrEqual(t, newCommitted, last, "the new chain's revisions were not stored")
}
