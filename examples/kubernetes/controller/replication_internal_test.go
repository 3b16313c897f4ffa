package controller

import (
	"testing"

	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/schedule"
)

// TestReplicaJobOfItsConfigOnly: a config's replication job copies and
// prunes the config's own backups alone (schedule.Replicate.Name), so two
// configs of one cluster replicated to one destination, in two namespaces,
// never prune each other's copies (see schedule's TestReplicationOfOneName).
func TestReplicaJobOfItsConfigOnly(t *testing.T) {
	for _, ns := range []string{"team-a", "team-b"} {
		name := backupName(ns, "nightly", "")
		backupJob := schedule.Job{ID: ns + "/nightly", Schedule: "@hourly", Cluster: "prod", Name: name,
			Destinations: []string{"primary"}, Retention: retention.KeepLast(3)}
		job, ok := replicaJob(backupJob, &v1alpha1.EtcdBackupConfigSpec{ReplicateTo: []string{"vault"}})
		if !ok {
			t.Fatal("no replication job")
		}
		if err := job.Validate(); err != nil {
			t.Fatal(err)
		}
		if r := job.Replicate; r == nil || r.Name != name || r.From != "primary" {
			t.Fatalf("%s: replication %+v, want the backups of %s alone", ns, r, name)
		}
	}
}
