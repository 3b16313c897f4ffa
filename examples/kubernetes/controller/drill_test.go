package controller_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/controller"
)

// TestConfigDrill runs a config with a restore drill on the real
// kube-apiserver, MinIO and etcd: once its backup landed, the drill
// restores it, and the config's status and Events say it passed.
func TestConfigDrill(t *testing.T) {
	cfg, c := startAPIServer(t)
	s3 := startMinIO(t)
	data := startEtcd(t, "data", t.TempDir(), nil)
	endpoint := "http://" + data.Clients[0].Addr().String()
	writeKeys(t, endpoint, "/registry/things/", 20, "")
	startManager(t, cfg, manager.Options{}, controller.Options{Registerer: prometheus.NewRegistry()})
	bc := config("drilled", "drill", "default", "", 0)
	bc.Spec.Drill = &v1alpha1.Drill{Interval: metav1.Duration{Duration: time.Hour}}
	create(t, c, secret("default", "minio", s3.access, s3.secret), dest("default", s3.bucket(t, "main"), "minio"),
		cluster("drill", []string{endpoint}), bc)
	var st v1alpha1.EtcdBackupConfigStatus
	eventually(t, "a drill's verdict in the config's status", func() bool {
		st = get(t, c, "drilled", &v1alpha1.EtcdBackupConfig{}).Status
		return st.LastDrill != nil
	})
	if !st.LastDrill.Passed || st.LastDrill.BackupID == "" {
		t.Fatalf("last drill %+v", st.LastDrill)
	}
	if got := condition(st.Conditions, v1alpha1.ConditionDrillSucceeded); got.Status != metav1.ConditionTrue {
		t.Errorf("DrillSucceeded = %+v", got)
	}
	eventually(t, "a DrillPassed event", func() bool { return hasEvent(events(t, c, "EtcdBackupConfig", "drilled"), "DrillPassed") })
}

// TestConfigDrillOwnBackup drills a config's own backup: a newer backup of
// the same cluster on the same destination, taken by a one-shot
// EtcdBackup of another namespace, is not the config's.
func TestConfigDrillOwnBackup(t *testing.T) {
	cfg, c := startAPIServer(t)
	s3 := startMinIO(t)
	data := startEtcd(t, "data", t.TempDir(), nil)
	endpoint := "http://" + data.Clients[0].Addr().String()
	writeKeys(t, endpoint, "/registry/things/", 5, "")
	startManager(t, cfg, manager.Options{}, controller.Options{Registerer: prometheus.NewRegistry()})
	create(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-b"}},
		secret("default", "minio", s3.access, s3.secret), dest("default", s3.bucket(t, "main"), "minio"),
		cluster("drill", []string{endpoint}), config("drilled", "drill", "default", "", 0))
	eventually(t, "the config's backup", func() bool {
		return get(t, c, "drilled", &v1alpha1.EtcdBackupConfig{}).Status.LastSuccess != nil
	})
	create(t, c, &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-b", Name: "other"}, Spec: v1alpha1.EtcdBackupSpec{Cluster: "drill"}})
	other := waitBackup(t, c, "tenant-b", "other")
	if other.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("one-shot backup %+v", other)
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		bc := get(t, c, "drilled", &v1alpha1.EtcdBackupConfig{})
		bc.Spec.Drill = &v1alpha1.Drill{Interval: metav1.Duration{Duration: time.Hour}}
		return c.Update(t.Context(), bc)
	}); err != nil {
		t.Fatal(err)
	}
	var st v1alpha1.EtcdBackupConfigStatus
	eventually(t, "a drill's verdict in the config's status", func() bool {
		st = get(t, c, "drilled", &v1alpha1.EtcdBackupConfig{}).Status
		return st.LastDrill != nil
	})
	if strings.HasPrefix(st.LastDrill.BackupID, other.BackupID) || !st.LastDrill.Passed {
		t.Fatalf("the config's drill %+v, the one-shot backup %s", st.LastDrill, other.BackupID)
	}
}
