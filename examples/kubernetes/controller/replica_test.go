package controller_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/etcdbackup/etcdbackup/examples/kubernetes/controller"
)

// replicaEnv names the kubeconfig a re-executed test binary runs a replica
// with, until it is killed.
const replicaEnv = "ETCDBACKUP_TEST_REPLICA_KUBECONFIG"

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	if path := os.Getenv(replicaEnv); path != "" {
		os.Exit(runReplica(path))
	}
	os.Exit(m.Run())
}

// The leader election's times. A leader that cannot renew its lease
// within renewDeadline gives it up and its manager fails: on a busy
// machine the API server can take seconds to answer, so these are
// controller-runtime's defaults, but for a shorter retry that lets a
// standby see a released lease sooner. A killed leader's lease is taken
// over after leaseDuration, well inside waitFor.
var (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 500 * time.Millisecond
)

func leaderOptions() manager.Options {
	return manager.Options{LeaderElection: true, LeaderElectionID: "etcdbackup-test", LeaderElectionNamespace: "default",
		LeaderElectionReleaseOnCancel: true, LeaseDuration: &leaseDuration, RenewDeadline: &renewDeadline, RetryPeriod: &retryPeriod}
}

// runReplica runs a manager with the controllers in this process, as a
// replica of the test's.
func runReplica(kubeconfig string) int {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return 2
	}
	opts := leaderOptions()
	s := newScheme()
	opts.Scheme, opts.Metrics, opts.Cache = s, metricsserver.Options{BindAddress: "0"}, controller.CacheOptions("default")
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return 2
	}
	if _, err := controller.Setup(mgr, controller.Options{Namespace: "default", Registerer: prometheus.NewRegistry()}); err != nil {
		return 2
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		return 1
	}
	return 0
}

// startReplica runs a replica in a child process and returns it.
func startReplica(t *testing.T, cfg *rest.Config) *exec.Cmd {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), replicaEnv+"="+path)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("replica's output:\n%s", out.String())
		}
	})
	return cmd
}

// TestLeaderKilled kills the leader, a replica in another process, with
// SIGKILL: the replica in this process takes over once the lease expires,
// and its first backup starts after the dead leader's last one was
// committed.
func TestLeaderKilled(t *testing.T) {
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
	leader := startReplica(t, cfg)
	eventually(t, "the child replica backs up three times", func() bool { return len(backupTimes(t, s3, "main", "prod")) >= 3 })
	reg := prometheus.NewRegistry()
	startManager(t, cfg, leaderOptions(), controller.Options{Registerer: reg})
	eventually(t, "the child replica backs up twice more", func() bool { return len(backupTimes(t, s3, "main", "prod")) >= 5 })
	if n := successes(t, reg); n != 0 {
		t.Fatalf("the follower ran %v backups", n)
	}

	if err := leader.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = leader.Wait()
	ranByLeader := len(backupTimes(t, s3, "main", "prod"))
	eventually(t, "the follower takes over", func() bool { return successes(t, reg) >= 2 })
	ms := backupTimes(t, s3, "main", "prod")
	if got, want := len(ms), ranByLeader+int(successes(t, reg)); got < want || got > want+1 {
		t.Fatalf("%d backups on MinIO: %d of the killed leader, %v of the new one", got, ranByLeader, successes(t, reg))
	}
	lastOld, firstNew := ms[ranByLeader-1], ms[ranByLeader]
	if !firstNew.Created.After(lastOld.Completed) {
		t.Fatalf("the new leader's first backup started at %v, before the killed leader's last was committed at %v", firstNew.Created, lastOld.Completed)
	}
}
