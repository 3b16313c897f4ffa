package backup_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/api/v3/version"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

func etcdTestContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// testLogger logs to the test's log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func etcdSnapshotterFor(t *testing.T, cfg backup.EtcdConfig) *backup.EtcdSnapshotter {
	t.Helper()
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 3 * time.Second
	}
	s, err := backup.NewEtcdSnapshotter(cfg)
	require.NoError(t, err)
	return s
}

// saveEtcdSnapshot drains a snapshot into a file, as an upload would, and
// returns the file's path and the final info.
func saveEtcdSnapshot(t *testing.T, ctx context.Context, s backup.Snapshotter) (string, backup.SnapshotInfo) {
	t.Helper()
	snap, err := s.Snapshot(ctx)
	require.NoError(t, err)
	defer snap.Close()
	path := filepath.Join(t.TempDir(), "snapshot.db")
	f, err := os.Create(path)
	require.NoError(t, err)
	_, err = io.Copy(f, snap)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, snap.Close())
	return path, snap.Info()
}

// etcdutlRestore runs etcd's own restore, hash check on, into a new data directory.
func etcdutlRestore(t *testing.T, path, name string) (string, error) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "restored")
	peer := "http://127.0.0.1:2380" // recorded in the restored membership only
	return dir, snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        path,
		Name:                name,
		OutputDataDir:       dir,
		PeerURLs:            []string{peer},
		InitialCluster:      name + "=" + peer,
		InitialClusterToken: "restored",
		SkipHashCheck:       false,
	})
}

func TestEtcdSnapshotRestore(t *testing.T) {
	src := etcdtest.Start(t)
	ctx := etcdTestContext(t)
	cli := src.Client(t)
	fill, err := etcdtest.Fill(ctx, cli, etcdtest.FillOptions{Keys: 5000, Seed: 1})
	require.NoError(t, err)
	storageVersion := src.WaitStorageVersion(t)
	running := goleak.IgnoreCurrent()

	s := etcdSnapshotterFor(t, backup.EtcdConfig{Endpoints: src.Endpoints()})
	path, info := saveEtcdSnapshot(t, ctx, s)
	goleak.VerifyNone(t, running) // the snapshot's client and stream are gone

	// What the snapshot says about itself.
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, info.Complete)
	assert.EqualValues(t, len(data), info.Size)
	assert.Equal(t, sha256.Sum256(data), info.SHA256)
	assert.Equal(t, backup.TrailerSize, len(data)%512, "etcd's trailer rule")
	assert.Equal(t, src.Endpoints()[0], info.Endpoint)
	assert.Equal(t, src.ID(), info.MemberID)
	assert.Equal(t, src.Name(), info.MemberName)
	assert.NotZero(t, info.ClusterID)
	assert.Equal(t, version.Version, info.EtcdVersion)
	assert.Equal(t, storageVersion, info.StorageVersion)
	assert.True(t, info.Leader)
	assert.False(t, info.Learner)
	assert.NotZero(t, info.RaftAppliedIndex)
	assert.Positive(t, info.DBSize)
	t.Logf("snapshot: %d bytes, db size %d, storage version %q, revisions [%d, %d]",
		info.Size, info.DBSize, info.StorageVersion, info.RevisionLow, info.RevisionHigh)

	// Nothing was written meanwhile, so the revision is exact, and it is the
	// revision of the data as etcdutl reads it from the file.
	rev, exact := info.Revision()
	require.True(t, exact)
	assert.Equal(t, fill.Revision, rev)
	st, err := snapshot.NewV3(zap.NewNop()).Status(path)
	require.NoError(t, err)
	assert.Equal(t, fill.Revision, st.Revision)
	assert.Equal(t, info.StorageVersion, st.Version)

	// etcd's restore, hash check on, accepts the bytes we handed on...
	dir, err := etcdutlRestore(t, path, "restored")
	require.NoError(t, err)

	// ...and rejects them with one flipped bit: it checks the same trailer.
	data[len(data)/2] ^= 1
	bad := filepath.Join(t.TempDir(), "bad.db")
	require.NoError(t, os.WriteFile(bad, data, 0o600))
	_, err = etcdutlRestore(t, bad, "bad")
	require.Error(t, err)
	t.Logf("etcdutl on a flipped bit: %v", err)

	// The restored member serves the data.
	restored := etcdtest.Start(t, etcdtest.WithDataDir(dir), etcdtest.WithName("restored"))
	rcli := restored.Client(t)
	count, err := rcli.Get(ctx, "/registry", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	assert.EqualValues(t, 5000, count.Count)
	assert.Equal(t, fill.Revision, count.Header.Revision)
	for _, i := range []int{0, 1, 2500, 4999} {
		key := etcdtest.FillKey("", i)
		want, err := cli.Get(ctx, key)
		require.NoError(t, err)
		got, err := rcli.Get(ctx, key)
		require.NoError(t, err)
		require.Len(t, got.Kvs, 1, key)
		assert.Equal(t, want.Kvs[0].Value, got.Kvs[0].Value, key)
		assert.Equal(t, want.Kvs[0].ModRevision, got.Kvs[0].ModRevision, key)
	}
}

// slowSnapshotReader reads the snapshot in small pieces with pauses, so that writes
// land while the stream is open.
type slowSnapshotReader struct{ r io.Reader }

func (s slowSnapshotReader) Read(p []byte) (int, error) {
	time.Sleep(2 * time.Millisecond)
	return s.r.Read(p[:min(len(p), 32<<10)])
}

func TestEtcdSnapshotRevisionBoundsUnderWrites(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := etcdTestContext(t)
	cli := srv.Client(t)
	fill, err := etcdtest.Fill(ctx, cli, etcdtest.FillOptions{Keys: 2000, Seed: 2})
	require.NoError(t, err)

	// A writer keeps the revision moving during the snapshot.
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var writes atomic.Int64
	wg.Go(func() {
		for i := 0; wctx.Err() == nil; i++ {
			if _, err := cli.Put(wctx, fmt.Sprintf("/writes/%d", i), "x"); err == nil {
				writes.Add(1)
			}
		}
	})
	require.Eventually(t, func() bool { return writes.Load() > 10 }, 30*time.Second, 5*time.Millisecond)

	s := etcdSnapshotterFor(t, backup.EtcdConfig{Endpoints: srv.Endpoints()})
	snap, err := s.Snapshot(ctx)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "snapshot.db")
	f, err := os.Create(path)
	require.NoError(t, err)
	_, err = io.Copy(f, slowSnapshotReader{snap})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, snap.Close())
	stop()
	wg.Wait()

	info := snap.Info()
	st, err := snapshot.NewV3(zap.NewNop()).Status(path)
	require.NoError(t, err)
	t.Logf("revisions [%d, %d], data at %d, %d writes", info.RevisionLow, info.RevisionHigh, st.Revision, writes.Load())
	assert.Greater(t, info.RevisionLow, fill.Revision, "the writer had written before the stream opened")
	assert.Less(t, info.RevisionLow, info.RevisionHigh, "writes landed while the stream was open")
	assert.GreaterOrEqual(t, st.Revision, info.RevisionLow)
	assert.LessOrEqual(t, st.Revision, info.RevisionHigh)
	_, exact := info.Revision()
	assert.False(t, exact)
}

func TestEtcdSnapshotMemberChoice(t *testing.T) {
	servers := etcdtest.StartCluster(t, 3)
	learner := etcdtest.AddLearner(t, servers)
	leader := etcdtest.Leader(t, servers)
	ctx := etcdTestContext(t)
	_, err := etcdtest.Fill(ctx, leader.Client(t), etcdtest.FillOptions{Keys: 300, Seed: 3})
	require.NoError(t, err)
	all := append(etcdtest.Endpoints(servers...), learner.Endpoints()...)
	names := map[uint64]string{learner.ID(): learner.Name()}
	for _, s := range servers {
		names[s.ID()] = s.Name()
	}

	// Applied indexes before the snapshot: the chosen member's index when
	// it was chosen cannot be below any of them.
	var maxApplied uint64
	for _, ep := range all {
		st, err := leader.Client(t).Status(ctx, ep)
		require.NoError(t, err)
		maxApplied = max(maxApplied, st.RaftAppliedIndex)
	}

	t.Run("highest applied", func(t *testing.T) {
		_, info := saveEtcdSnapshot(t, ctx, etcdSnapshotterFor(t, backup.EtcdConfig{Endpoints: all}))
		assert.True(t, info.Complete)
		assert.GreaterOrEqual(t, info.RaftAppliedIndex, maxApplied)
		require.Contains(t, names, info.MemberID)
		assert.Equal(t, names[info.MemberID], info.MemberName)
		assert.Contains(t, all, info.Endpoint)
	})

	t.Run("prefer non-leader never picks the leader", func(t *testing.T) {
		s := etcdSnapshotterFor(t, backup.EtcdConfig{Endpoints: all, Member: backup.PreferNonLeader})
		for range 3 {
			_, info := saveEtcdSnapshot(t, ctx, s)
			assert.True(t, info.Complete)
			assert.False(t, info.Leader)
			assert.NotEqual(t, leader.ID(), info.MemberID)
			assert.NotEqual(t, leader.Endpoints()[0], info.Endpoint)
		}
	})

	t.Run("prefer non-leader with the leader listed alone", func(t *testing.T) {
		s := etcdSnapshotterFor(t, backup.EtcdConfig{Endpoints: leader.Endpoints(), Member: backup.PreferNonLeader})
		_, info := saveEtcdSnapshot(t, ctx, s)
		assert.True(t, info.Leader, "falls back to the only member it may ask")
	})

	t.Run("learner", func(t *testing.T) {
		path, info := saveEtcdSnapshot(t, ctx, etcdSnapshotterFor(t, backup.EtcdConfig{Endpoints: learner.Endpoints()}))
		assert.True(t, info.Learner)
		assert.Equal(t, learner.ID(), info.MemberID)
		assert.Empty(t, info.MemberName, "a learner cannot list members, and no voter was given")
		_, err := etcdutlRestore(t, path, "from-learner")
		require.NoError(t, err)
	})

	t.Run("an unreachable endpoint is skipped", func(t *testing.T) {
		eps := append([]string{"http://127.0.0.1:1"}, servers[0].Endpoints()...)
		_, info := saveEtcdSnapshot(t, ctx, etcdSnapshotterFor(t, backup.EtcdConfig{Endpoints: eps, DialTimeout: time.Second, Logger: testLogger(t)}))
		assert.Equal(t, servers[0].ID(), info.MemberID)
	})
}

func TestEtcdSnapshotAuth(t *testing.T) {
	srv := etcdtest.Start(t)
	const password = "correct-horse-battery-staple"
	etcdtest.EnableAuth(t, password, srv)
	ctx := etcdTestContext(t)

	s := etcdSnapshotterFor(t, backup.EtcdConfig{Endpoints: srv.Endpoints(), Username: "root", Password: "wrong-" + password})
	snap, err := s.Snapshot(ctx)
	require.Error(t, err)
	assert.Nil(t, snap)
	assert.ErrorIs(t, err, backup.ErrNoMember)
	assert.ErrorIs(t, err, rpctypes.ErrAuthFailed)
	assert.Contains(t, err.Error(), "authentication failed")
	assert.Contains(t, err.Error(), srv.Endpoints()[0])
	assert.NotContains(t, err.Error(), password)
	t.Logf("wrong password: %v", err)

	s = etcdSnapshotterFor(t, backup.EtcdConfig{Endpoints: srv.Endpoints(), Username: "root", Password: password})
	_, info := saveEtcdSnapshot(t, ctx, s)
	assert.True(t, info.Complete)
	assert.Equal(t, srv.Name(), info.MemberName)
}

func TestEtcdSnapshotTLS(t *testing.T) {
	ca := etcdtest.NewCA(t)
	// The server's certificate names etcd.internal, not 127.0.0.1; the
	// client's names 127.0.0.1, which etcd checks against the connection.
	serverFiles := ca.Issue(t, etcdtest.CertOptions{CommonName: "server", DNSNames: []string{"etcd.internal"}})
	clientFiles := ca.Issue(t, etcdtest.CertOptions{CommonName: "client"})
	srv := etcdtest.Start(t, etcdtest.WithClientTLS(serverFiles, true))
	ctx := etcdTestContext(t)

	tlsInfo := &transport.TLSInfo{
		TrustedCAFile: clientFiles.CAFile,
		CertFile:      clientFiles.CertFile,
		KeyFile:       clientFiles.KeyFile,
		ServerName:    "etcd.internal",
	}
	_, info := saveEtcdSnapshot(t, ctx, etcdSnapshotterFor(t, backup.EtcdConfig{Endpoints: srv.Endpoints(), TLS: tlsInfo, Logger: testLogger(t)}))
	assert.True(t, info.Complete)

	// Without the server name, the certificate does not match 127.0.0.1.
	noName := *tlsInfo
	noName.ServerName = ""
	s := etcdSnapshotterFor(t, backup.EtcdConfig{Endpoints: srv.Endpoints(), TLS: &noName, DialTimeout: tlsFaultDialTimeout})
	_, err := s.Snapshot(ctx)
	require.ErrorIs(t, err, backup.ErrNoMember)
	assert.Contains(t, err.Error(), "x509", "the handshake's error, not only a timeout")
	t.Logf("no server name: %v", err)

	// A CA that did not sign the server's certificate.
	other := etcdtest.NewCA(t).Issue(t, etcdtest.CertOptions{})
	wrongCA := *tlsInfo
	wrongCA.TrustedCAFile = other.CAFile
	s = etcdSnapshotterFor(t, backup.EtcdConfig{Endpoints: srv.Endpoints(), TLS: &wrongCA, DialTimeout: tlsFaultDialTimeout})
	_, err = s.Snapshot(ctx)
	require.ErrorIs(t, err, backup.ErrNoMember)
	assert.Contains(t, err.Error(), "certificate signed by unknown authority")
	t.Logf("wrong CA: %v", err)
}

func TestEtcdSnapshotCloseAndCancelMidStream(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := etcdTestContext(t)
	_, err := etcdtest.Fill(ctx, srv.Client(t), etcdtest.FillOptions{Keys: 2000, Seed: 4})
	require.NoError(t, err)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := etcdSnapshotterFor(t, backup.EtcdConfig{Endpoints: srv.Endpoints()})
	buf := make([]byte, 1000)

	t.Run("close before the end", func(t *testing.T) {
		snap, err := s.Snapshot(ctx)
		require.NoError(t, err)
		_, err = io.ReadFull(snap, buf)
		require.NoError(t, err)
		require.NoError(t, snap.Close())
		_, err = snap.Read(buf)
		require.Error(t, err)
		assert.False(t, snap.Info().Complete)
	})

	t.Run("cancel", func(t *testing.T) {
		sctx, cancel := context.WithCancel(ctx)
		snap, err := s.Snapshot(sctx)
		require.NoError(t, err)
		defer snap.Close()
		_, err = io.ReadFull(snap, buf)
		require.NoError(t, err)
		cancel()
		_, err = io.Copy(io.Discard, snap)
		require.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, backup.ErrSnapshotIntegrity)
		assert.False(t, snap.Info().Complete)
	})

	t.Run("close from another goroutine", func(t *testing.T) {
		snap, err := s.Snapshot(ctx)
		require.NoError(t, err)
		_, err = io.ReadFull(snap, buf)
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			_, err := io.Copy(io.Discard, slowSnapshotReader{snap})
			done <- err
		}()
		time.Sleep(10 * time.Millisecond)
		require.NoError(t, snap.Close())
		select {
		case err := <-done:
			require.Error(t, err, "the stream was closed before its end")
		case <-time.After(30 * time.Second):
			t.Fatal("Close did not abort the Read")
		}
	})

	t.Run("cancelled before", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := s.Snapshot(cctx)
		require.Error(t, err)
		assert.True(t, errors.Is(err, context.Canceled) || errors.Is(err, backup.ErrNoMember), err.Error())
	})
}

// TestEtcdSnapshotConcurrentStreams: snapshots read at once from one
// member, in reads of odd sizes, each end with a matching trailer, hand
// on what they recorded and restore with etcd's hash check: no chunk's
// buffer is shared or released early between streams. (Two snapshots of
// an idle member need not be the same bytes: bbolt's pages differ.)
func TestEtcdSnapshotConcurrentStreams(t *testing.T) {
	src := etcdtest.Start(t)
	ctx := etcdTestContext(t)
	_, err := etcdtest.Fill(ctx, src.Client(t), etcdtest.FillOptions{Keys: 3000, Seed: 2})
	require.NoError(t, err)
	s := etcdSnapshotterFor(t, backup.EtcdConfig{Endpoints: src.Endpoints()})

	const n = 4
	infos := make([]backup.SnapshotInfo, n)
	paths := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		paths[i] = filepath.Join(t.TempDir(), "snapshot.db")
		wg.Go(func() {
			snap, err := s.Snapshot(ctx)
			if !assert.NoError(t, err) {
				return
			}
			defer snap.Close()
			f, err := os.Create(paths[i])
			if !assert.NoError(t, err) {
				return
			}
			defer f.Close()
			buf := make([]byte, 997+i*4093)
			_, err = io.CopyBuffer(struct{ io.Writer }{f}, struct{ io.Reader }{snap}, buf)
			assert.NoError(t, err)
			infos[i] = snap.Info()
		})
	}
	wg.Wait()
	for i := range n {
		data, err := os.ReadFile(paths[i])
		require.NoError(t, err)
		require.True(t, infos[i].Complete, "snapshot %d", i)
		require.Equal(t, infos[i].SHA256, sha256.Sum256(data), "snapshot %d", i)
		_, err = etcdutlRestore(t, paths[i], fmt.Sprintf("restored%d", i))
		require.NoError(t, err, "snapshot %d", i)
	}
}
