package controller_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/controller"
)

// TestRestoreStepAfterCompleted runs the restore step of members again
// while a Completed EtcdRestore is left in place: a member that applied it
// starts as it is, a member whose volume was replaced is refused (the old
// plan is never restored again), and a member the restore does not list
// (a scale-up) starts on its data as it is.
func TestRestoreStepAfterCompleted(t *testing.T) {
	env, cfg, c := startEnv(t)
	s3 := startMinIO(t)
	data := startEtcd(t, "data", t.TempDir(), nil)
	endpoint := "http://" + data.Clients[0].Addr().String()
	writeKeys(t, endpoint, "/registry/things/", 5, "")
	startManager(t, cfg, manager.Options{}, controller.Options{Registerer: prometheus.NewRegistry()})
	create(t, c, secret("default", "minio", s3.access, s3.secret), dest("default", s3.bucket(t, "main"), "minio"),
		cluster("three", []string{endpoint}),
		&v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "full"}, Spec: v1alpha1.EtcdBackupSpec{Cluster: "three"}})
	if b := waitBackup(t, c, "default", "full"); b.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("backup %+v", b)
	}
	members := []v1alpha1.PlannedMember{{Name: "m0", PeerURLs: []string{"http://" + freeAddr(t)}}, {Name: "m1", PeerURLs: []string{"http://" + freeAddr(t)}}}
	create(t, c, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "beside"},
		Spec: v1alpha1.EtcdRestoreSpec{Cluster: "three", Members: members}})
	volume := t.TempDir()
	run := stepRunner(t, env, s3)
	mainURL := getDest(t, c, "default").Spec.URL
	dir := func(name string) string { return filepath.Join(volume, name, "data") }
	step := func(name string) error { return run("default/beside", name, dir(name), mainURL) }
	for _, n := range []string{"m0", "m1", "m3"} {
		if err := os.MkdirAll(filepath.Join(volume, n), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := run("default/beside", "m0", dir("m0"), mainURL, "--cluster=other"); err == nil {
		t.Fatal("a step restored a restore of another cluster than its --cluster")
	}
	for _, n := range []string{"m0", "m1"} {
		if err := step(n); err != nil {
			t.Fatalf("restore step of %s: %v", n, err)
		}
	}
	if st := waitRestore(t, c, "beside"); st.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("restore status %+v", st)
	}
	if err := step("m1"); err != nil { // the pod restarted
		t.Fatalf("the step of a member that applied the Completed restore: %v", err)
	}
	if err := os.RemoveAll(dir("m0")); err != nil { // m0's volume replaced
		t.Fatal(err)
	}
	if err := step("m0"); err == nil {
		t.Error("the step of a member whose volume was replaced succeeded on a Completed restore")
	}
	if _, err := os.Stat(dir("m0")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a Completed restore was applied again to a replaced volume: %v", err)
	}
	if err := step("m3"); err != nil { // a new member, not in the plan
		t.Errorf("the step of a member the Completed restore does not list: %v", err)
	}
	if _, err := os.Stat(dir("m3")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the step of a member the restore does not list wrote its data directory: %v", err)
	}
}

// TestRestorePlanRewritten rewrites status.plan after the controller
// published it, as anyone who may update etcdrestores/status (the member
// pods) can: the next member's step refuses it and the controller fails
// the restore instead of reporting it Completed. A member report that
// names another plan fails a restore too.
func TestRestorePlanRewritten(t *testing.T) {
	env, cfg, c := startEnv(t)
	s3 := startMinIO(t)
	data := startEtcd(t, "data", t.TempDir(), nil)
	endpoint := "http://" + data.Clients[0].Addr().String()
	writeKeys(t, endpoint, "/registry/things/", 5, "")
	startManager(t, cfg, manager.Options{}, controller.Options{Registerer: prometheus.NewRegistry()})
	create(t, c, secret("default", "minio", s3.access, s3.secret), dest("default", s3.bucket(t, "main"), "minio"),
		cluster("three", []string{endpoint}),
		&v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "old"}, Spec: v1alpha1.EtcdBackupSpec{Cluster: "three"}})
	old := waitBackup(t, c, "default", "old")
	writeKeys(t, endpoint, "/registry/newer/", 5, "")
	create(t, c, &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "newer"}, Spec: v1alpha1.EtcdBackupSpec{Cluster: "three"}})
	newer := waitBackup(t, c, "default", "newer")
	if old.Phase != v1alpha1.PhaseCompleted || newer.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("backups %+v %+v", old, newer)
	}
	members := []v1alpha1.PlannedMember{{Name: "m0", PeerURLs: []string{"http://" + freeAddr(t)}}, {Name: "m1", PeerURLs: []string{"http://" + freeAddr(t)}}}
	create(t, c, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "beside"},
		Spec: v1alpha1.EtcdRestoreSpec{Cluster: "three", BackupID: old.BackupID, Members: members}})
	volume := t.TempDir()
	run := stepRunner(t, env, s3)
	mainURL := getDest(t, c, "default").Spec.URL
	step := func(name string) error {
		return run("default/beside", name, filepath.Join(volume, name, "data"), mainURL)
	}
	for _, n := range []string{"m0", "m1"} {
		if err := os.MkdirAll(filepath.Join(volume, n), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := step("m0"); err != nil {
		t.Fatal(err)
	}
	var rs *v1alpha1.EtcdRestore
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rs = get(t, c, "beside", &v1alpha1.EtcdRestore{})
		rs.Status.Plan.BackupID = newer.BackupID
		return c.Status().Update(t.Context(), rs)
	}); err != nil {
		t.Fatal(err)
	}
	if err := step("m1"); err == nil {
		t.Error("a member restored from a rewritten plan")
	}
	if _, err := os.Stat(filepath.Join(volume, "m1", "data")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a rewritten plan was restored: %v", err)
	}
	if st := waitRestore(t, c, "beside"); st.Phase != v1alpha1.PhaseFailed {
		t.Errorf("restore with a rewritten plan: phase %s, message %q", st.Phase, st.Message)
	}

	// A member report of another plan than the one published.
	create(t, c, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "forged"},
		Spec: v1alpha1.EtcdRestoreSpec{Cluster: "three", BackupID: old.BackupID, Members: members[:1]}})
	eventually(t, "the plan of restore forged", func() bool {
		rs = get(t, c, "forged", &v1alpha1.EtcdRestore{})
		return rs.Status.Plan != nil
	})
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rs = get(t, c, "forged", &v1alpha1.EtcdRestore{})
		rs.Status.Members = []v1alpha1.MemberRestoreStatus{{Name: "m0", Phase: v1alpha1.PhaseCompleted, PlanDigest: "0123"}}
		return c.Status().Update(t.Context(), rs)
	}); err != nil {
		t.Fatal(err)
	}
	if st := waitRestore(t, c, "forged"); st.Phase != v1alpha1.PhaseFailed {
		t.Errorf("restore with a member report of another plan: phase %s, message %q", st.Phase, st.Message)
	}
}
