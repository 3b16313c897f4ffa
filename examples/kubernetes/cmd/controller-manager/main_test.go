package main

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// TestRunsOutsideTheCluster runs the controller-manager as a user would
// outside a cluster, with a kubeconfig: it takes its namespace from the
// kubeconfig's context, from $POD_NAMESPACE, or from --namespace, and
// leads from there. Its probes check the destinations and the scheduler,
// and its metrics answer only a client the API server authorises.
func TestRunsOutsideTheCluster(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run make tools, then make test")
	}
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd")}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(raw)
	if err != nil {
		t.Fatal(err)
	}
	kc.Contexts[kc.CurrentContext].Namespace = "from-kubeconfig"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", path)

	t.Run("namespace", func(t *testing.T) {
		loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{})
		for _, tc := range []struct{ flag, pod, want string }{
			{"", "", "from-kubeconfig"},
			{"", "from-pod", "from-pod"},
			{"from-flag", "from-pod", "from-flag"},
		} {
			got, err := namespaceOf(tc.flag, func(string) string { return tc.pod }, loader)
			if err != nil || got != tc.want {
				t.Errorf("flag %q, POD_NAMESPACE %q: %q, %v; want %q", tc.flag, tc.pod, got, err, tc.want)
			}
		}
	})

	// One run per process: controller-runtime registers each controller's
	// name and metrics once.
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "from-kubeconfig"}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	getenv := func(k string) string {
		if k == "POD_NAMESPACE" {
			return ""
		}
		return os.Getenv(k)
	}
	metricsAddr, probeAddr := freeAddr(t), freeAddr(t)
	args := []string{"--metrics-bind-address=" + metricsAddr, "--health-probe-bind-address=" + probeAddr}
	go func() { done <- run(ctx, args, getenv, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	deadline := time.After(60 * time.Second)
	for {
		err := c.Get(ctx, types.NamespacedName{Namespace: "from-kubeconfig", Name: "etcdbackup-controller-manager"}, &coordinationv1.Lease{})
		if err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the controller-manager stopped: %v", err)
		case <-deadline:
			t.Fatalf("no lease in the kubeconfig's namespace: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Run("probes", func(t *testing.T) {
		for _, path := range []string{"/readyz/destinations", "/healthz/scheduler"} {
			waitStatus(t, &http.Client{}, "http://"+probeAddr+path, "", http.StatusOK)
		}
	})
	t.Run("metrics", func(t *testing.T) { checkMetricsAuth(t, cfg, "https://"+metricsAddr+"/metrics") })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

// checkMetricsAuth checks that the metrics endpoint answers only a client
// the API server authenticates and authorises: no token is refused, the
// token of a service account without the metrics reader's role too, and
// one bound to config/rbac's metrics reader gets the metrics.
func checkMetricsAuth(t *testing.T, cfg *rest.Config, url string) {
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "metrics_reader_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var reader rbacv1.ClusterRole
	if err := yaml.Unmarshal(raw, &reader); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &reader, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const ns = "from-kubeconfig"
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "scraper"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "scraper"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(name string) string {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	// The certificate is self-signed: this client checks who may read,
	// not the server's name.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	waitStatus(t, hc, url, "", http.StatusUnauthorized)
	if status, _ := get(t, hc, url, "not-a-token"); status == http.StatusOK {
		t.Errorf("a made-up token: status %d", status)
	}
	if status, _ := get(t, hc, url, token("stranger")); status != http.StatusForbidden {
		t.Errorf("a service account without the metrics reader's role: status %d", status)
	}
	if status, body := get(t, hc, url, token("scraper")); status != http.StatusOK || !strings.Contains(body, "controller_runtime_") {
		t.Errorf("the metrics reader: status %d, %.200s", status, body)
	}
	if status, _ := get(t, &http.Client{}, strings.Replace(url, "https:", "http:", 1), ""); status == http.StatusOK {
		t.Error("metrics served on plain HTTP")
	}
}

// get returns the status and the body of a GET of url, with a bearer
// token unless empty; a request that fails has status 0.
func get(t *testing.T, hc *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// waitStatus waits up to 30 s for a GET of url to answer want.
func waitStatus(t *testing.T, hc *http.Client, url, token string, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, body := get(t, hc, url, token)
		if status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: status %d (%.200s), want %d", url, status, body, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// freeAddr returns a loopback address no one listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestMetricsCertificate: a --metrics-cert-dir without a certificate and
// key fails the start instead of serving a self-signed certificate the
// scrapers do not trust; one with them is used; without the flag a
// self-signed certificate is served, whatever a directory under /tmp
// holds.
func TestMetricsCertificate(t *testing.T) {
	if _, err := metricsOptions(":0", true, t.TempDir()); err == nil || !strings.Contains(err.Error(), "metrics certificate") {
		t.Errorf("a directory without tls.crt and tls.key: %v", err)
	}
	dir := t.TempDir()
	crt, key, err := certutil.GenerateSelfSignedCertKey("metrics.example", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(os.WriteFile(filepath.Join(dir, "tls.crt"), crt, 0o600), os.WriteFile(filepath.Join(dir, "tls.key"), key, 0o600)); err != nil {
		t.Fatal(err)
	}
	o, err := metricsOptions(":0", true, dir)
	if err != nil || o.CertDir != dir {
		t.Errorf("a directory with a certificate: %v, %q", err, o.CertDir)
	}
	o, err = metricsOptions(":0", true, "")
	if err != nil {
		t.Fatal(err)
	}
	var c tls.Config
	for _, opt := range o.TLSOpts {
		opt(&c)
	}
	if c.GetCertificate == nil {
		t.Fatal("no certificate without --metrics-cert-dir: controller-runtime would look under /tmp")
	}
	cert, err := c.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil || cert == nil || len(cert.Certificate) == 0 {
		t.Errorf("the self-signed certificate: %v", err)
	}
}
