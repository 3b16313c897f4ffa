package backup

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// TestEtcdSnapshotOpenRechecksLeader: a member chosen while it had a
// leader, which then loses it (the other two members of three stop), is
// refused when its snapshot is opened, with ErrMemberNotCurrent: its data
// may be arbitrarily old from then on.
func TestEtcdSnapshotOpenRechecksLeader(t *testing.T) {
	servers := etcdtest.StartCluster(t, 3)
	etcdtest.Leader(t, servers)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	left := servers[2]
	s, err := NewEtcdSnapshotter(EtcdConfig{Endpoints: left.Endpoints()[:1], DialTimeout: 2 * time.Second})
	require.NoError(t, err)
	members := s.probe(ctx, nil)
	chosen, err := chooseMember(members, s.cfg.Member, s.cfg.maxRevisionLag())
	require.NoError(t, err, "the member has a leader when it is chosen")
	defer chosen.close()

	for _, o := range servers[:2] {
		o.Stop()
	}
	cli := left.Client(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := cli.Status(ctx, left.Endpoints()[0])
		if err == nil && st.Leader == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the member left alone never lost its leader")
		time.Sleep(50 * time.Millisecond)
	}
	snap, err := s.open(ctx, chosen, "", nil)
	if snap != nil {
		_ = snap.Close()
	}
	require.ErrorIs(t, err, ErrMemberNotCurrent)
}
