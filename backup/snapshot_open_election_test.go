package backup

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// electingMember answers its first gaps statuses as a member of a cluster
// electing a new leader (no leader known), and then as the member does.
type electingMember struct {
	pb.MaintenanceClient
	gaps  int32
	calls atomic.Int32
}

func (m *electingMember) Status(ctx context.Context, in *pb.StatusRequest, opts ...grpc.CallOption) (*pb.StatusResponse, error) {
	st, err := m.MaintenanceClient.Status(ctx, in, opts...)
	if err == nil && m.calls.Add(1) <= m.gaps {
		st.Leader = 0 // a response of its own
		return st, nil
	}
	return st, err
}

// openDuringElection opens a snapshot of a real member whose first gaps
// statuses at open know no leader.
func openDuringElection(t *testing.T, gaps int32) (*Snapshot, *electingMember, error) {
	srv := etcdtest.Start(t)
	s, err := NewEtcdSnapshotter(EtcdConfig{Endpoints: srv.Endpoints(), DialTimeout: 2 * time.Second})
	require.NoError(t, err)
	members := s.probe(t.Context(), nil)
	chosen, err := chooseMember(members, s.cfg.Member, s.cfg.maxRevisionLag())
	require.NoError(t, err)
	t.Cleanup(chosen.close)
	electing := &electingMember{MaintenanceClient: chosen.remote, gaps: gaps}
	chosen.remote = electing
	snap, err := s.open(t.Context(), chosen, "", nil)
	return snap, electing, err
}

// TestSnapshotOpenWaitsForElection: the member chosen knows no leader
// when its snapshot opens, as during the election after a leader's
// failure: open asks again, and snapshots it once it knows the new one.
func TestSnapshotOpenWaitsForElection(t *testing.T) {
	snap, electing, err := openDuringElection(t, 2)
	require.NoError(t, err, "a member refused during a momentary election")
	require.NotZero(t, snap.Info().LeaderID)
	require.Equal(t, int32(3), electing.calls.Load())
	require.NoError(t, snap.Close())
}

// TestSnapshotOpenRefusesMemberWithoutLeader: a member that knows no
// leader for longer than an election takes is refused, within a bound.
func TestSnapshotOpenRefusesMemberWithoutLeader(t *testing.T) {
	start := time.Now()
	_, _, err := openDuringElection(t, 1000)
	require.ErrorIs(t, err, ErrMemberNotCurrent)
	require.Less(t, time.Since(start), leaderWait+10*time.Second)
}
