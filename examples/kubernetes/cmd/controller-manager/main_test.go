package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestRunsOutsideTheCluster runs the controller-manager as a user would
// outside a cluster, with a kubeconfig: it takes its namespace from the
// kubeconfig's context, from $POD_NAMESPACE, or from --namespace, and
// leads from there.
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
	args := []string{"--metrics-bind-address=0", "--health-probe-bind-address=0"}
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
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}
