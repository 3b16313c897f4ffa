package controller_test

import (
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/etcdbackup/etcdbackup/examples/kubernetes/controller"
)

// A host adds the controllers to its manager, with leader election: the
// scheduler runs on the leader only.
func ExampleSetup() {
	scheme := runtime.NewScheme()
	if err := controller.AddToScheme(scheme); err != nil {
		panic(err)
	}
	const namespace = "etcdbackup-system" // the controller's: its Secrets and Lease
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                        scheme,
		Cache:                         controller.CacheOptions(namespace),
		LeaderElection:                true,
		LeaderElectionID:              "etcdbackup-controller-manager",
		LeaderElectionNamespace:       namespace,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		panic(err)
	}
	parts, err := controller.Setup(mgr, controller.Options{Namespace: namespace, RestoreDir: "/var/lib/etcd-restores"})
	if err != nil {
		panic(err)
	}
	defer parts.Close()
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		panic(err)
	}
}
