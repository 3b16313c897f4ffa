package controller_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
