package kubernetes

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// render builds a kustomization as `kubectl kustomize` does.
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range res.Resources() {
		m, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs
}

// generatedCRDNames are the names of the CRDs controller-gen wrote into
// config/crd.
func generatedCRDNames(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("config", "crd", "backup.etcdbackup.io_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no generated CRD: %v", err)
	}
	var names []string
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		if err := yaml.Unmarshal(raw, &crd); err != nil {
			t.Fatal(err)
		}
		names = append(names, crd.Metadata.Name)
	}
	slices.Sort(names)
	return names
}

// TestDefaultManifests renders config/default with kustomize's Go API,
// checks that it holds every generated CRD and what a cluster needs to run
// the controller (namespaced objects in its namespace, bindings to roles
// and a service account it defines, a non-root Deployment with probes and
// limits), then applies it with server-side dry run to a real
// kube-apiserver.
func TestDefaultManifests(t *testing.T) {
	objs := render(t, filepath.Join("config", "default"))
	byKind := map[string][]*unstructured.Unstructured{}
	for _, o := range objs {
		byKind[o.GetKind()] = append(byKind[o.GetKind()], o)
		if ns := o.GetNamespace(); ns != "" && ns != "etcdbackup-system" {
			t.Errorf("%s %s is in namespace %s", o.GetKind(), o.GetName(), ns)
		}
	}
	var crds []string
	for _, o := range byKind["CustomResourceDefinition"] {
		crds = append(crds, o.GetName())
	}
	slices.Sort(crds)
	if want := generatedCRDNames(t); !slices.Equal(crds, want) {
		t.Errorf("CRDs %q, want the generated %q", crds, want)
	}
	for _, kind := range []string{"Namespace", "ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "Deployment", "Service", "NetworkPolicy"} {
		if len(byKind[kind]) == 0 {
			t.Errorf("no %s", kind)
		}
	}
	checkBindings(t, byKind)
	checkDeployment(t, byKind)
	checkMetricsService(t, byKind)
	if t.Failed() {
		return
	}
	applyDryRun(t, objs)
}

// checkBindings checks that every binding names a role and a service
// account the manifests define.
func checkBindings(t *testing.T, byKind map[string][]*unstructured.Unstructured) {
	t.Helper()
	defined := func(kind, name string) bool {
		return slices.ContainsFunc(byKind[kind], func(o *unstructured.Unstructured) bool { return o.GetName() == name })
	}
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, b := range byKind[kind] {
			ref, _, _ := unstructured.NestedStringMap(b.Object, "roleRef")
			if !defined(ref["kind"], ref["name"]) {
				t.Errorf("%s %s binds %s %s, which the manifests do not define", kind, b.GetName(), ref["kind"], ref["name"])
			}
			subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
			for _, s := range subjects {
				s := s.(map[string]any)
				if s["kind"] != "ServiceAccount" || !defined("ServiceAccount", s["name"].(string)) || s["namespace"] != "etcdbackup-system" {
					t.Errorf("%s %s: subject %v is not the controller's service account", kind, b.GetName(), s)
				}
			}
		}
	}
}

// checkDeployment checks the controller-manager's Deployment: its service
// account, a non-root security context, probes, requests and limits.
func checkDeployment(t *testing.T, byKind map[string][]*unstructured.Unstructured) {
	t.Helper()
	if len(byKind["Deployment"]) != 1 {
		return
	}
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(byKind["Deployment"][0].Object, &d); err != nil {
		t.Fatal(err)
	}
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != "etcdbackup" {
		t.Errorf("service account %q", pod.ServiceAccountName)
	}
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("the pod may run as root")
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Error("one replica: no standby for leader election")
	}
	for _, c := range pod.Containers {
		if c.LivenessProbe == nil || c.ReadinessProbe == nil {
			t.Errorf("container %s lacks a probe", c.Name)
		}
		if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("container %s lacks memory requests or limits", c.Name)
		}
		if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("container %s: security context %+v", c.Name, sc)
		}
		if !strings.HasPrefix(c.Image, "etcdbackup/controller-manager:") {
			t.Errorf("container %s: image %s", c.Name, c.Image)
		}
	}
}

// checkMetricsService checks that the metrics Service lists the pods that
// are not ready too: the leader is not ready while its destinations do not
// load, which its metrics are needed to tell.
func checkMetricsService(t *testing.T, byKind map[string][]*unstructured.Unstructured) {
	t.Helper()
	for _, o := range byKind["Service"] {
		var svc corev1.Service
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &svc); err != nil {
			t.Fatal(err)
		}
		if !svc.Spec.PublishNotReadyAddresses {
			t.Errorf("service %s leaves out the pods that are not ready, the leader whose destinations do not load among them", svc.Name)
		}
	}
}

// applyDryRun applies the objects with server-side apply to a real
// kube-apiserver: the namespace for real (a dry run creates nothing for
// the objects in it), everything else as a dry run.
func applyDryRun(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run make tools, then make test")
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop kube-apiserver: %v", err)
		}
	})
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		return boolInt(b.GetKind() == "Namespace") - boolInt(a.GetKind() == "Namespace")
	})
	for _, o := range objs {
		opts := []client.ApplyOption{client.ForceOwnership, client.FieldOwner("etcdbackup-manifests-test")}
		if o.GetKind() != "Namespace" {
			opts = append(opts, client.DryRunAll)
		}
		if err := c.Apply(t.Context(), client.ApplyConfigurationFromUnstructured(o), opts...); err != nil {
			t.Errorf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestManifestsFollowTheNamespace renders an overlay of config/default
// that sets another namespace, as a deployment into its own namespace
// does: every namespaced object, the Namespace itself and the bindings'
// service account follow it, and nothing names etcdbackup-system any more
// (the Role of the credentials Secrets included).
func TestManifestsFollowTheNamespace(t *testing.T) {
	dir := t.TempDir()
	base, err := filepath.Abs(filepath.Join("config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, base)
	if err != nil {
		t.Fatal(err)
	}
	overlay := "namespace: backups\nresources:\n- " + filepath.ToSlash(rel) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o600); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, o := range render(t, dir) {
		kinds[o.GetKind()] = true
		raw, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), "etcdbackup-system") {
			t.Errorf("%s %s still names etcdbackup-system", o.GetKind(), o.GetName())
		}
		switch {
		case o.GetKind() == "Namespace" && o.GetName() != "backups":
			t.Errorf("namespace %s", o.GetName())
		case o.GetNamespace() != "" && o.GetNamespace() != "backups":
			t.Errorf("%s %s is in namespace %s", o.GetKind(), o.GetName(), o.GetNamespace())
		}
	}
	for _, kind := range []string{"Namespace", "Role", "RoleBinding", "ClusterRoleBinding", "Deployment"} {
		if !kinds[kind] {
			t.Errorf("no %s", kind)
		}
	}
}
