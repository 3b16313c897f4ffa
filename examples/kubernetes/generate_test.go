package kubernetes

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// generateArgs are the arguments `make generate` gives controller-gen,
// with the output directories last.
func generateArgs(crd, rbac string) []string {
	return []string{
		"crd", "paths=./api/...", "output:crd:dir=" + crd,
		"rbac:roleName=etcdbackup-controller", "paths=./controller/...", "output:rbac:dir=" + rbac,
	}
}

// handwritten are the files of config/crd and config/rbac that
// controller-gen does not write: kustomize's lists, the service account
// and bindings the generated roles are given to, and the metrics
// endpoint's roles.
var handwritten = map[string]bool{"kustomization.yaml": true, "service_account.yaml": true, "role_binding.yaml": true,
	"metrics_auth_role.yaml": true, "metrics_reader_role.yaml": true}

// TestGeneratedManifestsAreCurrent regenerates the CRDs and the RBAC with
// the pinned controller-gen and compares them with the committed files.
func TestGeneratedManifestsAreCurrent(t *testing.T) {
	bin := os.Getenv("CONTROLLER_GEN")
	if bin == "" {
		t.Fatal("CONTROLLER_GEN is not set: run make tools, then make test")
	}
	out := t.TempDir()
	crd, rbac := filepath.Join(out, "crd"), filepath.Join(out, "rbac")
	cmd := exec.Command(bin, generateArgs(crd, rbac)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen: %v\n%s", err, b)
	}
	for _, dir := range []struct{ generated, committed string }{
		{crd, filepath.Join("config", "crd")},
		{rbac, filepath.Join("config", "rbac")},
	} {
		gen, err := filepath.Glob(filepath.Join(dir.generated, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		committed, err := filepath.Glob(filepath.Join(dir.committed, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		committed = slices.DeleteFunc(committed, func(f string) bool { return handwritten[filepath.Base(f)] })
		if len(gen) != len(committed) || len(gen) == 0 {
			t.Errorf("%s holds %d files, controller-gen writes %d: run make generate", dir.committed, len(committed), len(gen))
		}
		for _, g := range gen {
			want, err := os.ReadFile(g)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(dir.committed, filepath.Base(g)))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s is not current: run make generate", filepath.Join(dir.committed, filepath.Base(g)))
			}
		}
	}
}
