package backup

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
)

// closeRecorder is a ReadCloser that records Close.
type closeRecorder struct {
	io.Reader
	closed int
}

func (c *closeRecorder) Close() error { c.closed++; return nil }

func TestSnapshotCompletesInfoAtEOF(t *testing.T) {
	stream := makeStream(4096, 10)
	rc := &closeRecorder{Reader: bytes.NewReader(stream)}
	calls := 0
	snap := NewSnapshot(rc, SnapshotInfo{MemberID: 7, RevisionLow: 40}, func(info SnapshotInfo) (SnapshotInfo, error) {
		calls++
		assert.True(t, info.Complete, "finish sees the verified stream")
		assert.EqualValues(t, len(stream), info.Size)
		info.RevisionHigh = 42
		return info, nil
	})

	before := snap.Info()
	assert.False(t, before.Complete)
	assert.Zero(t, before.RevisionHigh)
	assert.False(t, before.Started.IsZero())
	_, exact := before.Revision()
	assert.False(t, exact)

	got, err := io.ReadAll(snap)
	require.NoError(t, err)
	assert.Equal(t, stream, got)
	n, err := snap.Read(make([]byte, 8))
	assert.Zero(t, n)
	assert.Equal(t, io.EOF, err)
	assert.Equal(t, 1, calls, "finish runs once")

	info := snap.Info()
	assert.True(t, info.Complete)
	assert.EqualValues(t, 7, info.MemberID)
	assert.EqualValues(t, len(stream), info.Size)
	assert.Equal(t, sha256.Sum256(stream), info.SHA256)
	assert.EqualValues(t, 40, info.RevisionLow)
	assert.EqualValues(t, 42, info.RevisionHigh)
	assert.False(t, info.Finished.Before(info.Started))
	_, exact = info.Revision()
	assert.False(t, exact, "bounds differ")

	require.NoError(t, snap.Close())
	require.NoError(t, snap.Close())
	assert.Equal(t, 1, rc.closed)
	_, err = snap.Read(make([]byte, 1))
	assert.Error(t, err, "read after close")
}

func TestSnapshotExactRevision(t *testing.T) {
	snap := NewSnapshot(io.NopCloser(bytes.NewReader(makeStream(512, 1))), SnapshotInfo{RevisionLow: 9},
		func(info SnapshotInfo) (SnapshotInfo, error) { info.RevisionHigh = 9; return info, nil })
	_, err := io.Copy(io.Discard, snap)
	require.NoError(t, err)
	rev, exact := snap.Info().Revision()
	assert.True(t, exact)
	assert.EqualValues(t, 9, rev)
}

func TestSnapshotNilFinishAndIgnoredInputs(t *testing.T) {
	stream := makeStream(512, 2)
	// Fields that only the end of the stream may set are cleared.
	snap := NewSnapshot(io.NopCloser(bytes.NewReader(stream)), SnapshotInfo{Complete: true, Size: 1}, nil)
	assert.False(t, snap.Info().Complete)
	_, err := io.Copy(io.Discard, snap)
	require.NoError(t, err)
	assert.True(t, snap.Info().Complete)
	assert.EqualValues(t, len(stream), snap.Info().Size)
}

func TestSnapshotFinishErrorReplacesEOF(t *testing.T) {
	boom := errors.New("member changed")
	snap := NewSnapshot(io.NopCloser(bytes.NewReader(makeStream(512, 3))), SnapshotInfo{},
		func(info SnapshotInfo) (SnapshotInfo, error) { return info, boom })
	_, err := io.Copy(io.Discard, snap)
	require.ErrorIs(t, err, boom)
	_, err = snap.Read(make([]byte, 1))
	require.ErrorIs(t, err, boom, "sticky")
}

func TestSnapshotDamagedStream(t *testing.T) {
	stream := makeStream(4096, 4)
	stream[0] ^= 1
	called := false
	snap := NewSnapshot(io.NopCloser(bytes.NewReader(stream)), SnapshotInfo{},
		func(info SnapshotInfo) (SnapshotInfo, error) { called = true; return info, nil })
	_, err := io.Copy(io.Discard, snap)
	require.ErrorIs(t, err, ErrSnapshotIntegrity)
	assert.False(t, called)
	assert.False(t, snap.Info().Complete)
}

func fakeStatus(id, leader, applied uint64, learner bool, errs ...string) *pb.StatusResponse {
	return &pb.StatusResponse{
		Header:           &pb.ResponseHeader{MemberId: id, ClusterId: 1, Revision: 5},
		Leader:           leader,
		RaftAppliedIndex: applied,
		IsLearner:        learner,
		Errors:           errs,
	}
}

func TestChooseMember(t *testing.T) {
	down := errors.New("connection refused")
	type m struct {
		st  *pb.StatusResponse
		err error
	}
	tests := []struct {
		name    string
		members []m
		choice  MemberChoice
		want    uint64 // member ID; 0 = error
	}{
		{"highest applied wins", []m{{st: fakeStatus(1, 1, 10, false)}, {st: fakeStatus(2, 1, 12, false)}, {st: fakeStatus(3, 1, 11, false)}}, HighestApplied, 2},
		{"leader when it is ahead", []m{{st: fakeStatus(1, 1, 12, false)}, {st: fakeStatus(2, 1, 11, false)}}, HighestApplied, 1},
		{"follower before leader on a tie", []m{{st: fakeStatus(1, 1, 12, false)}, {st: fakeStatus(2, 1, 12, false)}}, HighestApplied, 2},
		{"follower before learner on a tie", []m{{st: fakeStatus(3, 1, 12, true)}, {st: fakeStatus(2, 1, 12, false)}}, HighestApplied, 2},
		{"first endpoint on a full tie", []m{{st: fakeStatus(3, 1, 12, false)}, {st: fakeStatus(2, 1, 12, false)}}, HighestApplied, 3},
		{"unhealthy last", []m{{st: fakeStatus(1, 0, 20, false, "etcdserver: no leader")}, {st: fakeStatus(2, 2, 12, false)}}, HighestApplied, 2},
		{"alarmed last", []m{{st: fakeStatus(1, 1, 20, false, "etcdserver: NOSPACE")}, {st: fakeStatus(2, 1, 12, false)}}, HighestApplied, 2},
		{"alarmed when alone", []m{{st: fakeStatus(1, 1, 20, false, "etcdserver: NOSPACE")}, {err: down}}, HighestApplied, 1},
		{"no leader refused when alone", []m{{st: fakeStatus(1, 0, 20, false, "etcdserver: no leader")}, {err: down}}, HighestApplied, 0},
		{"unreachable skipped", []m{{err: down}, {st: fakeStatus(2, 2, 1, false)}}, HighestApplied, 2},
		{"prefer non-leader skips a fresher leader", []m{{st: fakeStatus(1, 1, 20, false)}, {st: fakeStatus(2, 1, 12, false)}, {st: fakeStatus(3, 1, 13, false)}}, PreferNonLeader, 3},
		{"prefer non-leader takes a learner", []m{{st: fakeStatus(1, 1, 20, false)}, {st: fakeStatus(4, 1, 12, true)}}, PreferNonLeader, 4},
		{"prefer non-leader falls back to the leader", []m{{st: fakeStatus(1, 1, 20, false)}, {err: down}}, PreferNonLeader, 1},
		{"two endpoints of one member", []m{{st: fakeStatus(1, 1, 20, false)}, {st: fakeStatus(1, 1, 20, false)}, {st: fakeStatus(2, 1, 20, false)}}, PreferNonLeader, 2},
		{"nobody", []m{{err: down}, {err: down}}, HighestApplied, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var members []*memberConn
			for i, mm := range tt.members {
				members = append(members, &memberConn{index: i, endpoint: fmt.Sprintf("ep%d", i), status: mm.st, err: mm.err})
			}
			got, err := chooseMember(members, tt.choice, DefaultMaxRevisionLag)
			if tt.want == 0 {
				if len(members) > 0 && members[0].err == nil {
					require.ErrorIs(t, err, ErrMemberNotCurrent)
				} else {
					require.ErrorIs(t, err, ErrNoMember)
				}
				require.ErrorIs(t, err, down, "each endpoint's error is wrapped")
				assert.NotContains(t, err.Error(), "\n", "one line")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got.id())
		})
	}
}

// TestChooseMemberRevisionLag refuses a follower too far behind its
// leader, and takes it within the bound or without one.
func TestChooseMemberRevisionLag(t *testing.T) {
	leader, follower := fakeStatus(1, 1, 500, false), fakeStatus(2, 1, 400, false)
	leader.Header.Revision, follower.Header.Revision = 1500, 400
	members := func() []*memberConn {
		return []*memberConn{{index: 0, endpoint: "ep0", status: leader}, {index: 1, endpoint: "ep1", status: follower}}
	}
	got, err := chooseMember(members(), PreferNonLeader, 100)
	require.NoError(t, err)
	assert.EqualValues(t, 1, got.id(), "the follower, 1100 revisions behind, is refused")
	got, err = chooseMember(members(), PreferNonLeader, 2000)
	require.NoError(t, err)
	assert.EqualValues(t, 2, got.id())
	got, err = chooseMember(members(), PreferNonLeader, -1)
	require.NoError(t, err)
	assert.EqualValues(t, 2, got.id(), "no bound")
	_, err = chooseMember(members()[1:], PreferNonLeader, 100)
	require.NoError(t, err, "the lag is measured only when the leader answered")
}

func TestEtcdConfigValidate(t *testing.T) {
	ok := EtcdConfig{Endpoints: []string{"http://127.0.0.1:2379", "10.0.0.2:2379", "https://etcd-2:2379", "unix:///run/etcd.sock"}}
	require.NoError(t, ok.Validate())

	tests := map[string]func(c *EtcdConfig){
		"no endpoints":         func(c *EtcdConfig) { c.Endpoints = nil },
		"empty endpoint":       func(c *EtcdConfig) { c.Endpoints = []string{""} },
		"spaces":               func(c *EtcdConfig) { c.Endpoints = []string{"http://a:1 "} },
		"bad scheme":           func(c *EtcdConfig) { c.Endpoints = []string{"ftp://a:1"} },
		"duplicate":            func(c *EtcdConfig) { c.Endpoints = []string{"a:1", "a:1"} },
		"user in url":          func(c *EtcdConfig) { c.Endpoints = []string{"http://root:hunter2@a:1"} },
		"user in bad url":      func(c *EtcdConfig) { c.Endpoints = []string{"http://root:hunter2@a :1"} },
		"user in host:port":    func(c *EtcdConfig) { c.Endpoints = []string{"root:hunter2@a:1"} },
		"unparseable url":      func(c *EtcdConfig) { c.Endpoints = []string{"http://a:1/%zz"} },
		"username only":        func(c *EtcdConfig) { c.Username = "root" },
		"password only":        func(c *EtcdConfig) { c.Password = "hunter2" },
		"negative timeout":     func(c *EtcdConfig) { c.DialTimeout = -time.Second },
		"unknown member":       func(c *EtcdConfig) { c.Member = 9 },
		"cert without its key": func(c *EtcdConfig) { c.TLS = &transport.TLSInfo{CertFile: "c.pem"} },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			c := ok
			mutate(&c)
			err := c.Validate()
			require.Error(t, err)
			assert.NotContains(t, err.Error(), "hunter2")
			_, err = NewEtcdSnapshotter(c)
			require.Error(t, err)
		})
	}
}

func TestNewEtcdSnapshotterBadTLSFile(t *testing.T) {
	_, err := NewEtcdSnapshotter(EtcdConfig{
		Endpoints: []string{"https://127.0.0.1:2379"},
		TLS:       &transport.TLSInfo{TrustedCAFile: t.TempDir() + "/missing-ca.pem"},
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "missing-ca.pem")
}

func TestEtcdConfigNeverShowsPassword(t *testing.T) {
	c := EtcdConfig{Endpoints: []string{"a:1"}, Username: "root", Password: "hunter2",
		TLS: &transport.TLSInfo{TrustedCAFile: "ca.pem"}}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("config", "etcd", c)
	for _, s := range []string{c.String(), fmt.Sprintf("%v %+v %#v %s", c, c, c, c), logged.String()} {
		assert.NotContains(t, s, "hunter2")
		assert.Contains(t, s, "root")
	}
	assert.Contains(t, c.String(), "REDACTED")
}
