package backup_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/internal/etcdtest"
)

// TestEtcdSnapshotRefusesMemberWithoutLeader backs up a three-member
// cluster, recording the member's health in the manifest, then stops two
// members: the one left knows no leader, and its data may be arbitrarily
// old, so the backup is refused with ErrMemberNotCurrent instead of being
// stored as fresh.
func TestEtcdSnapshotRefusesMemberWithoutLeader(t *testing.T) {
	servers := etcdtest.StartCluster(t, 3)
	leader := etcdtest.Leader(t, servers)
	ctx := etcdTestContext(t)
	_, err := etcdtest.Fill(ctx, leader.Client(t), etcdtest.FillOptions{Keys: 200, Seed: 4})
	require.NoError(t, err)
	snapshotter, err := backup.NewEtcdSnapshotter(backup.EtcdConfig{Endpoints: etcdtest.Endpoints(servers...),
		Member: backup.PreferNonLeader, DialTimeout: 2 * time.Second})
	require.NoError(t, err)
	b, _ := newFile(t)
	req := backup.Request{Cluster: "c", Name: "n", Scheduled: true,
		Targets: []backup.Target{{Destination: "file", Uploader: &backup.BucketUploader{Bucket: b}}}}
	p := &backup.Pipeline{Snapshotter: snapshotter}

	res, err := p.Run(ctx, req)
	require.NoError(t, err)
	m := res.Outcomes[0].Manifest
	require.NotNil(t, m.Etcd.Health, "the member's health is recorded")
	assert.True(t, m.Etcd.Health.Healthy)
	assert.Equal(t, fmtID(leader.ID()), m.Etcd.Health.Leader)
	assert.NotEqual(t, m.Etcd.MemberID, m.Etcd.Health.Leader, "a follower was chosen")
	assert.Positive(t, m.Etcd.Health.AppliedIndex)
	assert.Positive(t, m.Etcd.Health.LeaderAppliedIndex)
	assert.GreaterOrEqual(t, m.Etcd.Health.LeaderRevision, m.Etcd.Revision.Low-backup.DefaultMaxRevisionLag)

	// Cut the last member off from the majority.
	left := servers[2]
	for _, s := range servers[:2] {
		s.Stop()
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
	before := len(listKeys(t, b))
	_, err = p.Run(ctx, req)
	require.ErrorIs(t, err, backup.ErrMemberNotCurrent)
	assert.Len(t, listKeys(t, b), before, "nothing stored")
}

func fmtID(id uint64) string { return strconv.FormatUint(id, 16) }
