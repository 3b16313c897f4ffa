// Command controller-manager is a seed's controller-manager that hosts
// etcdbackup: it reconciles the backup.etcdbackup.io resources (see
// config/crd) with the controllers of package controller, with leader
// election, metrics on :8080 and health probes on :8081. Run it in the
// cluster with the RBAC of config/rbac, or outside with a kubeconfig:
//
//	kubectl apply -f config/crd -f config/admission
//	go run ./cmd/controller-manager --restore-dir=/var/lib/etcd-restores
package main

import (
	"errors"
	"flag"
	"log/slog"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/controller"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/azure"
	"github.com/etcdbackup/etcdbackup/storage/blob/gcs"
)

func main() {
	restoreDir := flag.String("restore-dir", "", "`directory` restores create data directories in (empty: restores refused)")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))

	scheme := runtime.NewScheme()
	if err := controller.AddToScheme(scheme); err != nil {
		fail(log, "scheme", err)
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: ":8080"},
		HealthProbeBindAddress: ":8081",
		LeaderElection:         true,
		LeaderElectionID:       "etcdbackup-controller-manager",
		// The scheduler's backups in flight finish before the lease goes.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		fail(log, "manager", err)
	}
	parts, err := controller.Setup(mgr, controller.Options{
		RestoreDir: *restoreDir,
		Logger:     log,
		// The drivers of the clouds this manager writes to; each links
		// its cloud's SDK.
		Destinations: destination.Options{Drivers: []blob.Driver{gcs.Driver(), azure.Driver()}},
	})
	if err != nil {
		fail(log, "setup", err)
	}
	if err := errors.Join(mgr.AddHealthzCheck("ping", healthz.Ping), mgr.AddReadyzCheck("ping", healthz.Ping)); err != nil {
		fail(log, "probes", err)
	}
	err = mgr.Start(ctrl.SetupSignalHandler())
	parts.Close()
	if err != nil {
		fail(log, "manager stopped", err)
	}
}

func fail(log *slog.Logger, what string, err error) {
	log.Error(what, "err", err)
	os.Exit(1)
}
