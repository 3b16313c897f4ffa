package controller_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/controller"
)

// generatedRoles reads config/rbac/role.yaml: the ClusterRole, and the
// Role of the controller's namespace.
func generatedRoles(t *testing.T) (*rbacv1.ClusterRole, *rbacv1.Role) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cr rbacv1.ClusterRole
	var r rbacv1.Role
	for _, doc := range bytes.Split(raw, []byte("\n---\n")) {
		switch {
		case bytes.Contains(doc, []byte("kind: ClusterRole")):
			err = yaml.Unmarshal(doc, &cr)
		case bytes.Contains(doc, []byte("kind: Role")):
			err = yaml.Unmarshal(doc, &r)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if cr.Name == "" || r.Namespace == "" {
		t.Fatalf("role.yaml lacks the ClusterRole or the Role: %q, %q", cr.Name, r.Namespace)
	}
	return &cr, &r
}

// TestNothingActsBeforeDestinationsLoad runs the controller as a user
// with the generated RBAC, first without the Role that lets it read its
// Secrets: the destinations cannot load. Meanwhile a cluster being
// deleted keeps its finalizer and its backups, a backup naming no
// destination stays Pending, and a config stays Accepted. Once the Role is
// bound, the destinations load and all of it goes on. The controller's
// readiness check fails until then.
func TestNothingActsBeforeDestinationsLoad(t *testing.T) {
	env, cfg, c := startEnv(t)
	s3 := startMinIO(t)
	data := startEtcd(t, "data", t.TempDir(), nil)
	endpoint := "http://" + data.Clients[0].Addr().String()
	fillEtcd(t, endpoint, 10)
	clusterRole, role := generatedRoles(t)
	ns := role.Namespace
	ctx := t.Context()
	ref := dest("default", s3.bucket(t, "main"), "minio")
	ref.Spec.CredentialsSecretRef.Namespace = ""
	create(t, c, namespace(ns), secret(ns, "minio", s3.access, s3.secret), ref,
		deleting(cluster("doomed", []string{endpoint})), cluster("steady", []string{endpoint}),
		config("steady", "steady", "default", "@every 1h", 0))

	// A first manager, with every right, backs the doomed cluster up.
	_, stop, stopped := startManager(t, cfg, manager.Options{}, controller.Options{Namespace: ns, Registerer: prometheus.NewRegistry()})
	create(t, c, &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "before"},
		Spec: v1alpha1.EtcdBackupSpec{Cluster: "doomed"}})
	if st := waitBackup(t, c, "default", "before"); st.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("backup: %+v", st)
	}
	accepted := func() bool {
		var bc v1alpha1.EtcdBackupConfig
		if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "steady"}, &bc); err != nil {
			t.Fatal(err)
		}
		return condition(bc.Status.Conditions, v1alpha1.ConditionAccepted).Status == metav1.ConditionTrue
	}
	eventually(t, "the config accepted", accepted)
	stop()
	<-stopped

	// The next one runs with the generated ClusterRole only.
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "etcdbackup"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "etcdbackup"}}
	create(t, c, clusterRole, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "etcdbackup"}, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole.Name}})
	parts, _, _ := startManager(t, user.Config(), manager.Options{}, controller.Options{Namespace: ns, Registerer: prometheus.NewRegistry()})
	if err := c.Delete(ctx, &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}); err != nil {
		t.Fatal(err)
	}
	create(t, c, &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "early"},
		Spec: v1alpha1.EtcdBackupSpec{Cluster: "steady"}})
	eventually(t, "the backup waits for the destinations", func() bool {
		var b v1alpha1.EtcdBackup
		if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "early"}, &b); err != nil {
			t.Fatal(err)
		}
		return b.Status.Phase == v1alpha1.PhasePending && strings.Contains(b.Status.Message, "not loaded")
	})
	var cl v1alpha1.EtcdCluster
	if err := c.Get(ctx, types.NamespacedName{Name: "doomed"}, &cl); err != nil {
		t.Fatalf("the cluster being deleted went before the destinations loaded: %v", err)
	}
	if !controllerutil.ContainsFinalizer(&cl, controller.Finalizer) || manifests(t, s3, "main", "doomed") != 1 {
		t.Errorf("before the destinations loaded: finalizers %q, %d backups", cl.Finalizers, manifests(t, s3, "main", "doomed"))
	}
	if !accepted() {
		t.Error("the config was refused before the destinations loaded")
	}
	// Not ready for want of the destinations alone: the scheduler and the
	// checks run.
	eventually(t, "readiness failing for the destinations only", func() bool {
		err := parts.Ready(nil)
		return err != nil && err.Error() == "the destinations are not loaded yet"
	})
	if err := parts.Live(nil); err != nil {
		t.Errorf("liveness before the destinations loaded: %v", err)
	}

	// The Role lets the controller read its Secrets: everything goes on.
	create(t, c, role, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "etcdbackup"}, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}})
	if st := waitBackup(t, c, "default", "early"); st.Phase != v1alpha1.PhaseCompleted {
		t.Errorf("backup after the destinations loaded: %+v", st)
	}
	if err := parts.Ready(nil); err != nil {
		t.Errorf("readiness once the destinations loaded: %v", err)
	}
	eventually(t, "the cluster torn down", func() bool {
		err := c.Get(ctx, client.ObjectKey{Name: "doomed"}, &v1alpha1.EtcdCluster{})
		return client.IgnoreNotFound(err) == nil && err != nil && manifests(t, s3, "main", "doomed") == 0
	})
	if !accepted() {
		t.Error("the config is not accepted")
	}
}

// TestDestinationsLoadWhenThereAreNone: with no BackupDestination yet (a
// fresh install), the destinations still load: the controller becomes
// ready, and a cluster deleted under the Delete policy, which has no
// backups anywhere, goes.
func TestDestinationsLoadWhenThereAreNone(t *testing.T) {
	_, cfg, c := startEnv(t)
	ctx := t.Context()
	create(t, c, deleting(cluster("new", []string{"http://127.0.0.1:1"})))
	parts, _, _ := startManager(t, cfg, manager.Options{}, controller.Options{Registerer: prometheus.NewRegistry()})
	eventually(t, "the controller ready", func() bool { return parts.Ready(nil) == nil })
	eventually(t, "the finalizer set", func() bool {
		var cl v1alpha1.EtcdCluster
		return c.Get(ctx, client.ObjectKey{Name: "new"}, &cl) == nil && controllerutil.ContainsFinalizer(&cl, controller.Finalizer)
	})
	if err := c.Delete(ctx, &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "new"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the cluster gone", func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Name: "new"}, &v1alpha1.EtcdCluster{}))
	})
}
