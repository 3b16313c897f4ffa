// Command controller-manager is a seed's controller-manager that hosts
// etcdbackup: it reconciles the backup.etcdbackup.io resources (see
// config/crd) with the controllers of package controller, with leader
// election, metrics on :8443 and health probes on :8081. Run it in the
// cluster with the RBAC of config/rbac, or outside with a kubeconfig:
//
//	kubectl apply -f config/crd -f config/admission
//	go run ./cmd/controller-manager --restore-dir=/var/lib/etcd-restores
//
// Its namespace holds the credentials Secrets it reads (no other) and its
// leader election Lease: --namespace, else $POD_NAMESPACE (set it from the
// downward API), else the namespace of the kubeconfig's context, or of the
// pod's service account in the cluster.
//
// Metrics are served on HTTPS to clients the API server authenticates
// (TokenReview) and authorises (SubjectAccessReview: get on the
// non-resource URL /metrics, config/rbac/metrics_reader_role.yaml), with
// the certificate of --metrics-cert-dir or a self-signed one;
// --metrics-secure=false serves them on plain HTTP to anyone who reaches
// the port. /readyz fails on the leader until its destinations are loaded
// and its scheduler runs; /healthz fails once the scheduler stopped.
package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	_ "time/tzdata" // schedules' and retention's time zones, in a static image without zoneinfo

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/controller"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/azure"
	"github.com/etcdbackup/etcdbackup/storage/blob/gcs"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:], os.Getenv, log); err != nil {
		log.Error("controller-manager", "err", err)
		os.Exit(1)
	}
}

// run parses args and runs the manager until ctx is done.
func run(ctx context.Context, args []string, getenv func(string) string, log *slog.Logger) error {
	fs := flag.NewFlagSet("controller-manager", flag.ContinueOnError)
	restoreDir := fs.String("restore-dir", "", "`directory` restores create data directories in (empty: restores refused)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig `file` outside the cluster (default: $KUBECONFIG, ~/.kube/config)")
	namespace := fs.String("namespace", "", "the controller's `namespace`: its credentials Secrets and leader Lease (default: $POD_NAMESPACE, else the kubeconfig context's)")
	metricsAddr := fs.String("metrics-bind-address", ":8443", "`address` of the metrics endpoint (0: none)")
	metricsSecure := fs.Bool("metrics-secure", true, "serve metrics on HTTPS to clients the API server authenticates and authorises; false: plain HTTP to anyone (keep it behind a NetworkPolicy)")
	metricsCertDir := fs.String("metrics-cert-dir", "", "`directory` of the metrics endpoint's tls.crt and tls.key (default: a self-signed certificate)")
	probeAddr := fs.String("health-probe-bind-address", ":8081", "`address` of the health probes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := loader.ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	ns, err := namespaceOf(*namespace, getenv, loader)
	if err != nil {
		return err
	}
	log.Info("starting", "namespace", ns)

	metrics, err := metricsOptions(*metricsAddr, *metricsSecure, *metricsCertDir)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := controller.AddToScheme(scheme); err != nil {
		return fmt.Errorf("scheme: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		// Credentials Secrets are read from the controller's namespace
		// only: the cache, and the RBAC it needs, stop there.
		Cache:                   controller.CacheOptions(ns),
		Metrics:                 metrics,
		HealthProbeBindAddress:  *probeAddr,
		LeaderElection:          true,
		LeaderElectionID:        "etcdbackup-controller-manager",
		LeaderElectionNamespace: ns,
		// The scheduler's backups in flight finish before the lease goes.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	parts, err := controller.Setup(mgr, controller.Options{
		Namespace:  ns,
		RestoreDir: *restoreDir,
		Logger:     log,
		// The drivers of the clouds this manager writes to; each links
		// its cloud's SDK.
		Destinations: destination.Options{Drivers: []blob.Driver{gcs.Driver(), azure.Driver()}},
	})
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	if err := errors.Join(mgr.AddHealthzCheck("scheduler", parts.Live), mgr.AddReadyzCheck("destinations", parts.Ready)); err != nil {
		return fmt.Errorf("probes: %w", err)
	}
	err = mgr.Start(ctx)
	parts.Close()
	if err != nil {
		return fmt.Errorf("manager stopped: %w", err)
	}
	return nil
}

// metricsOptions serves metrics on addr: on HTTPS (HTTP/1.1 only, against
// HTTP/2's stream resets) behind the API server's authentication and
// authorisation when secure, else on plain HTTP. The certificate is
// certDir's tls.crt and tls.key, reloaded when they change; a certDir
// without them is an error, never a silent self-signed certificate. With
// no certDir, a self-signed one is made in memory (controller-runtime's
// own default would first look for one in a directory under /tmp).
func metricsOptions(addr string, secure bool, certDir string) (metricsserver.Options, error) {
	if !secure {
		return metricsserver.Options{BindAddress: addr}, nil
	}
	o := metricsserver.Options{
		BindAddress:    addr,
		SecureServing:  true,
		FilterProvider: filters.WithAuthenticationAndAuthorization,
		CertDir:        certDir,
		TLSOpts:        []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
	}
	if certDir != "" {
		if _, err := tls.LoadX509KeyPair(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key")); err != nil {
			return o, fmt.Errorf("metrics certificate: %w", err)
		}
		return o, nil
	}
	crt, key, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	if err != nil {
		return o, fmt.Errorf("metrics certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return o, fmt.Errorf("metrics certificate: %w", err)
	}
	o.TLSOpts = append(o.TLSOpts, func(c *tls.Config) {
		c.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }
	})
	return o, nil
}

// namespaceOf returns the controller's namespace: the flag's, else
// $POD_NAMESPACE, else the kubeconfig context's (in a pod without a
// kubeconfig, the service account's).
func namespaceOf(flagValue string, getenv func(string) string, loader clientcmd.ClientConfig) (string, error) {
	if ns := cmp.Or(flagValue, getenv("POD_NAMESPACE")); ns != "" {
		return ns, nil
	}
	ns, _, err := loader.Namespace()
	if err != nil {
		return "", fmt.Errorf("namespace: %w", err)
	}
	return ns, nil
}
