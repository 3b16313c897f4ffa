package controller_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/controller"
)

// successes reads the successful backups a replica ran from its own
// metrics registry.
func successes(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "etcdbackup_backup_success_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

// TestLeaderElection runs two replicas against one API server: only the
// elected leader runs backups; when it stops, the other takes over, and
// no tick is backed up twice.
func TestLeaderElection(t *testing.T) {
	cfg, c := startAPIServer(t)
	s3 := startMinIO(t)
	data := startEtcd(t, "data", t.TempDir(), nil)
	endpoint := data.Clients[0].Addr().String()
	fillEtcd(t, "http://"+endpoint, 10)
	create(t, c,
		secret("default", "minio", s3.access, s3.secret),
		dest("default", s3.bucket(t, "main"), "minio"),
		cluster("prod", []string{"http://" + endpoint}),
		config("frequent", "prod", "default", "@every 1s", 0),
	)
	opts := leaderOptions
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	partsA, stopA, stoppedA := startManager(t, cfg, opts(), controller.Options{Registerer: regA})
	eventually(t, "replica a backs up", func() bool { return successes(t, regA) >= 1 })
	partsB, _, _ := startManager(t, cfg, opts(), controller.Options{Registerer: regB})
	eventually(t, "replica a backs up three more times", func() bool { return successes(t, regA) >= 4 })
	if n := successes(t, regB); n != 0 {
		t.Fatalf("replica b ran %v backups while a led", n)
	}
	// The leader and the standby are both ready and live: a rolling
	// update goes on, and nothing restarts either.
	for name, p := range map[string]*controller.Controllers{"a, the leader": partsA, "b, the standby": partsB} {
		if err := errors.Join(p.Ready(nil), p.Live(nil)); err != nil {
			t.Errorf("replica %s: %v", name, err)
		}
	}

	stopA()
	<-stoppedA
	ranA := successes(t, regA)
	eventually(t, "replica b takes over", func() bool { return successes(t, regB) >= 3 })
	if err := errors.Join(partsB.Ready(nil), partsB.Live(nil)); err != nil {
		t.Errorf("replica b, the new leader: %v", err)
	}
	if n := successes(t, regA); n != ranA {
		t.Fatalf("replica a ran backups after it stopped: %v, then %v", ranA, n)
	}
	// Every run of either replica is one backup on MinIO: the first ranA,
	// by creation, are replica a's, the others b's, and b's first started
	// after a's last was committed: no two runs overlapped.
	total := successes(t, regA) + successes(t, regB)
	ms := backupTimes(t, s3, "main", "prod")
	// Replica b may have finished one more run since it was counted.
	if got := float64(len(ms)); got < total || got > total+1 {
		t.Fatalf("%v backups on MinIO, %v runs reported", got, total)
	}
	lastA, firstB := ms[int(ranA)-1], ms[int(ranA)]
	if !firstB.Created.After(lastA.Completed) {
		t.Fatalf("replica b's first backup started at %v, before replica a's last was committed at %v", firstB.Created, lastA.Completed)
	}
}

// backupTimes reads the manifests of a cluster's backups, ordered by
// creation.
func backupTimes(t *testing.T, s *minioServer, bucket, cluster string) []backup.Manifest {
	t.Helper()
	var ms []backup.Manifest
	for _, k := range s.keys(t, bucket, cluster+"/") {
		if !strings.HasSuffix(k, backup.ManifestSuffix) {
			continue
		}
		obj, err := s.client.GetObject(t.Context(), bucket, k, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var m backup.Manifest
		err = json.NewDecoder(obj).Decode(&m)
		obj.Close()
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	slices.SortFunc(ms, func(a, b backup.Manifest) int { return a.Created.Compare(b.Created) })
	return ms
}
