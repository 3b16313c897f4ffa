package controller_test

import (
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/controller"
)

// TestRestoreBesideEachMember runs the restore of a whole cluster where
// its etcd runs: the controller publishes the plan of an EtcdRestore with
// three members, the restore step (cmd/restore-member, built here) runs
// as a process for each member as its init container would, with its own
// credentials and a kubeconfig, and reports back; a step run again (a
// restarted pod) changes nothing; the three members form a cluster that
// serves exactly the source's keys at the backup.
func TestRestoreBesideEachMember(t *testing.T) {
	env, cfg, c := startEnv(t)
	s3 := startMinIO(t)
	data := startEtcd(t, "data", t.TempDir(), nil)
	endpoint := "http://" + data.Clients[0].Addr().String()
	writeKeys(t, endpoint, "/registry/things/", 50, "/registry/things/007")
	startManager(t, cfg, manager.Options{}, controller.Options{Registerer: prometheus.NewRegistry()})
	create(t, c, secret("default", "minio", s3.access, s3.secret), dest("default", s3.bucket(t, "main"), "minio"),
		cluster("three", []string{endpoint}),
		&v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "full"}, Spec: v1alpha1.EtcdBackupSpec{Cluster: "three"}})
	full := waitBackup(t, c, "default", "full")
	if full.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("backup %+v", full)
	}
	want, _ := etcdKeys(t, endpoint, 0)

	names := []string{"m0", "m1", "m2"}
	peers := map[string]*url.URL{}
	var members []v1alpha1.PlannedMember
	for _, n := range names {
		peers[n] = &url.URL{Scheme: "http", Host: freeAddr(t)}
		members = append(members, v1alpha1.PlannedMember{Name: n, PeerURLs: []string{peers[n].String()}})
	}
	create(t, c, &v1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "beside"},
		Spec: v1alpha1.EtcdRestoreSpec{Cluster: "three", BackupID: full.BackupID, Members: members, ClusterToken: "restored"}})
	volume := t.TempDir() // each member's volume, as its pod mounts it
	mainURL := getDest(t, c, "default").Spec.URL
	run := stepRunner(t, env, s3)
	step := func(restore, name string, url ...string) error {
		return run(restore, name, filepath.Join(volume, name, "data"), append(url, mainURL)[0])
	}
	for _, n := range names {
		if err := os.MkdirAll(filepath.Join(volume, n), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// The plan is in a status others may write: a step sends its keys only
	// to the destination its own pod names.
	if err := step("default/beside", "m0", "s3://elsewhere?endpoint="+freeAddr(t)); err == nil {
		t.Fatal("a step restored from a plan naming another destination than its own")
	}
	if _, err := os.Stat(filepath.Join(volume, "m0", "data")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused step wrote the data directory: %v", err)
	}
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Go(func() {
			if err := step("default/beside", n); err != nil {
				t.Errorf("restore step of %s: %v", n, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	rs := waitRestore(t, c, "beside")
	if rs.Phase != v1alpha1.PhaseCompleted || rs.Plan == nil || rs.Plan.BackupID != full.BackupID || len(rs.Members) != 3 {
		t.Fatalf("restore status %+v", rs)
	}
	marker := filepath.Join(volume, "m1", "data", "etcdbackup-restore")
	before, err := os.ReadFile(marker)
	if err != nil {
		t.Fatal(err)
	}
	if err := step("default/beside", "m1"); err != nil { // the pod restarted
		t.Fatalf("the step run again: %v", err)
	}
	if err := step("default/deleted", "m1"); err != nil { // left in place after the restore went
		t.Fatalf("the step of a restore that does not exist: %v", err)
	}
	if after, err := os.ReadFile(marker); err != nil || string(after) != string(before) {
		t.Fatalf("the step run again rewrote the member: %q, %v", after, err)
	}
	if entries, _ := os.ReadDir(filepath.Join(volume, "m1")); len(entries) != 1 {
		t.Fatalf("the step run again left %d entries beside the data directory, want it alone", len(entries))
	}

	var servers []*embed.Etcd
	for _, n := range names {
		servers = append(servers, startRestoredMember(t, n, filepath.Join(volume, n, "data"), peers[n]))
	}
	for _, e := range servers {
		select {
		case <-e.Server.ReadyNotify():
		case <-time.After(60 * time.Second):
			t.Fatal("restored member not ready")
		}
	}
	for _, e := range servers {
		got, _ := etcdKeys(t, "http://"+e.Clients[0].Addr().String(), 0)
		if len(got) != len(want) {
			t.Fatalf("member %s serves %d keys, want %d", e.Config().Name, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("member %s: key %s = %q, want %q", e.Config().Name, k, got[k], v)
			}
		}
	}
	if n := len(servers[0].Server.Cluster().Members()); n != 3 {
		t.Fatalf("the restored cluster has %d members, want 3", n)
	}
}

// startRestoredMember starts an etcd on a restored data directory without
// waiting for it: the members of a cluster are ready together.
func startRestoredMember(t *testing.T, name, dir string, peer *url.URL) *embed.Etcd {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = name, dir
	client := &url.URL{Scheme: "http", Host: freeAddr(t)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster = name + "=" + peer.String() // ignored: the data directory holds the membership
	cfg.UnsafeNoFsync = true
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start etcd %s: %v", name, err)
	}
	t.Cleanup(e.Close)
	return e
}

// stepRunner builds cmd/restore-member and returns a function that runs
// it as a member's init container would: with a kubeconfig of its own and
// the destination's keys in its environment.
func stepRunner(t *testing.T, env *envtest.Environment, s3 *minioServer) func(restore, member, dataDir, destURL string, flags ...string) error {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "restore-member")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/restore-member").CombinedOutput(); err != nil {
		t.Fatalf("build restore-member: %v\n%s", err, out)
	}
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "member", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kcPath := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kcPath, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return func(restore, member, dataDir, destURL string, flags ...string) error {
		cmd := exec.Command(bin, append([]string{"--restore=" + restore, "--member=" + member, "--data-dir=" + dataDir,
			"--kubeconfig=" + kcPath, "--wait=30s", "--destination-url=" + destURL}, flags...)...)
		cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+s3.access, "AWS_SECRET_ACCESS_KEY="+s3.secret)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Logf("restore step of %s:\n%s", member, out)
		}
		return err
	}
}
