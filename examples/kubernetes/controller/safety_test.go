package controller_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/controller"
)

// requestLog records the Authorization headers an endpoint received.
type requestLog struct {
	mu    sync.Mutex
	auths []string
}

func (l *requestLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	l.auths = append(l.auths, r.Header.Get("Authorization"))
	l.mu.Unlock()
	w.WriteHeader(http.StatusForbidden)
}

func (l *requestLog) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.auths {
		if strings.Contains(a, s) {
			return true
		}
	}
	return false
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func getDest(t *testing.T, c client.Client, name string) v1alpha1.BackupDestination {
	t.Helper()
	var d v1alpha1.BackupDestination
	if err := c.Get(t.Context(), types.NamespacedName{Name: name}, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSecretOfAnotherNamespaceRefused: a BackupDestination naming a
// Secret outside the controller's namespace, with an endpoint its author
// controls, is refused, and the Secret's keys never reach the endpoint;
// one naming a Secret of the controller's namespace is used. One naming
// no Secret with such an endpoint is refused too: the controller's own
// credentials (here its AWS_* variables) never reach the endpoint.
func TestSecretOfAnotherNamespaceRefused(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AMBIENTACCESSKEY")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "ambient-secret-key")
	cfg, c := startAPIServer(t)
	endpoint := &requestLog{}
	srv := httptest.NewServer(endpoint)
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	startManager(t, cfg, manager.Options{}, controller.Options{Namespace: "ops", Registerer: prometheus.NewRegistry()})

	evil := dest("evil", fmt.Sprintf("s3://loot?endpoint=%s&insecure=true", addr), "")
	evil.Spec.CredentialsSecretRef = &v1alpha1.SecretReference{Namespace: "tenant", Name: "keys"}
	own := dest("own", fmt.Sprintf("s3://own?endpoint=%s&insecure=true", addr), "")
	own.Spec.CredentialsSecretRef = &v1alpha1.SecretReference{Name: "keys"} // the controller's namespace
	ambient := dest("ambient", fmt.Sprintf("s3://ambient?endpoint=%s&insecure=true", addr), "")
	create(t, c, namespace("ops"), namespace("tenant"),
		secret("tenant", "keys", "TENANTACCESSKEY", "tenant-secret-key"),
		secret("ops", "keys", "OPSACCESSKEY", "ops-secret-key"),
		evil, own, ambient)

	eventually(t, "the destination of the controller's namespace is checked", func() bool {
		return endpoint.contains("OPSACCESSKEY")
	})
	eventually(t, "the destination without a Secret refused or checked", func() bool {
		d := getDest(t, c, "ambient")
		return condition(d.Status.Conditions, v1alpha1.ConditionAccepted).Status == metav1.ConditionFalse ||
			condition(d.Status.Conditions, v1alpha1.ConditionAvailable).Status == metav1.ConditionFalse
	})
	if endpoint.contains("AMBIENTACCESSKEY") {
		t.Error("the controller's own access key reached the destination's endpoint")
	}
	if got := condition(getDest(t, c, "ambient").Status.Conditions, v1alpha1.ConditionAccepted); got.Status != metav1.ConditionFalse || got.Reason != "CredentialsSecretNeeded" {
		t.Errorf("ambient: Accepted = %+v, want False, CredentialsSecretNeeded", got)
	}
	// The statuses are written one after the other, after the apply that
	// let the checks reach the endpoint: wait for each.
	eventually(t, "evil: Accepted False, SecretNamespace", func() bool {
		got := condition(getDest(t, c, "evil").Status.Conditions, v1alpha1.ConditionAccepted)
		return got.Status == metav1.ConditionFalse && got.Reason == "SecretNamespace" && strings.Contains(got.Message, "tenant/keys")
	})
	eventually(t, "own: Accepted True", func() bool {
		return condition(getDest(t, c, "own").Status.Conditions, v1alpha1.ConditionAccepted).Status == metav1.ConditionTrue
	})
	if endpoint.contains("TENANTACCESSKEY") {
		t.Error("the tenant's access key reached the destination's endpoint")
	}
}

// TestSafety: what deletion, retention and a lost status update do to
// backups, and that one bad destination does not hold back the others.
func TestSafety(t *testing.T) {
	cfg, c := startAPIServer(t)
	s3 := startMinIO(t)
	data := startEtcd(t, "data", t.TempDir(), nil)
	endpoint := "http://" + data.Clients[0].Addr().String()
	fillEtcd(t, endpoint, 10)
	startManager(t, cfg, manager.Options{}, controller.Options{Registerer: prometheus.NewRegistry()})
	ctx := t.Context()
	create(t, c, namespace("a"), namespace("b"),
		secret("default", "minio", s3.access, s3.secret),
		dest("default", s3.bucket(t, "main"), "minio"))

	oneShot := func(ns, name, clusterName string) v1alpha1.EtcdBackupStatus {
		t.Helper()
		create(t, c, &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.EtcdBackupSpec{Cluster: clusterName}})
		return waitBackup(t, c, ns, name)
	}
	gone := func(name string) func() bool {
		return func() bool {
			return apierrors.IsNotFound(c.Get(ctx, types.NamespacedName{Name: name}, &v1alpha1.EtcdCluster{}))
		}
	}

	t.Run("deleting a cluster keeps its backups by default", func(t *testing.T) {
		create(t, c, cluster("kept", []string{endpoint}))
		if st := oneShot("default", "kept", "kept"); st.Phase != v1alpha1.PhaseCompleted {
			t.Fatalf("backup: %+v", st)
		}
		var cl v1alpha1.EtcdCluster
		if err := c.Get(ctx, types.NamespacedName{Name: "kept"}, &cl); err != nil {
			t.Fatal(err)
		}
		if cl.Spec.DeletionPolicy != v1alpha1.DeletionRetain || len(cl.Finalizers) != 0 {
			t.Errorf("policy %q, finalizers %q: want Retain and none", cl.Spec.DeletionPolicy, cl.Finalizers)
		}
		if err := c.Delete(ctx, &cl); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the cluster is gone", gone("kept"))
		if n := manifests(t, s3, "main", "kept"); n != 1 {
			t.Errorf("%d backups of the deleted cluster, want 1", n)
		}
	})

	t.Run("Delete waits for its grace period, and Retain set in it keeps the backups", func(t *testing.T) {
		cl := deleting(cluster("graced", []string{endpoint}))
		cl.Spec.DeletionGracePeriod = &metav1.Duration{Duration: time.Hour}
		create(t, c, cl)
		if st := oneShot("default", "graced", "graced"); st.Phase != v1alpha1.PhaseCompleted {
			t.Fatalf("backup: %+v", st)
		}
		if err := c.Delete(ctx, cl); err != nil {
			t.Fatal(err)
		}
		eventually(t, "TornDown says when", func() bool {
			if err := c.Get(ctx, types.NamespacedName{Name: "graced"}, cl); err != nil {
				t.Fatal(err)
			}
			return condition(cl.Status.Conditions, v1alpha1.ConditionTornDown).Reason == "GracePeriod"
		})
		if n := manifests(t, s3, "main", "graced"); n != 1 {
			t.Fatalf("%d backups during the grace period, want 1", n)
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, types.NamespacedName{Name: "graced"}, cl); err != nil {
				return err
			}
			cl.Spec.DeletionPolicy = v1alpha1.DeletionRetain
			return c.Update(ctx, cl)
		})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "the cluster is gone", gone("graced"))
		if n := manifests(t, s3, "main", "graced"); n != 1 {
			t.Errorf("%d backups after Retain was set, want 1", n)
		}
	})

	t.Run("Delete deletes them, and leaves a dead destination after the teardown timeout", func(t *testing.T) {
		create(t, c, dest("dead", fmt.Sprintf("s3://gone?endpoint=%s&insecure=true", freeAddr(t)), "minio"))
		cl := deleting(cluster("doomed", []string{endpoint}))
		cl.Spec.TeardownTimeout = &metav1.Duration{Duration: time.Second}
		create(t, c, cl)
		if st := oneShot("default", "doomed", "doomed"); st.Phase != v1alpha1.PhaseCompleted {
			t.Fatalf("backup: %+v", st)
		}
		if err := c.Delete(ctx, cl); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the cluster is gone", gone("doomed"))
		if keys := s3.keys(t, "main", "doomed/"); len(keys) != 0 {
			t.Errorf("doomed's objects left on main: %q", keys)
		}
		eventually(t, "a BackupsLeft event", func() bool { return hasEvent(events(t, c, "EtcdCluster", "doomed"), "BackupsLeft") })
		if err := c.Delete(ctx, &v1alpha1.BackupDestination{ObjectMeta: metav1.ObjectMeta{Name: "dead"}}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("two namespaces never share backups or retention", func(t *testing.T) {
		create(t, c, cluster("shared", []string{endpoint}))
		keep := func(ns string, n int32) *v1alpha1.EtcdBackupConfig {
			bc := config("nightly", "shared", "default", "@every 1s", n)
			bc.Namespace = ns
			return bc
		}
		create(t, c, keep("a", 3), keep("b", 1))
		count := func(ns string) int {
			n := 0
			for _, k := range s3.keys(t, "main", "shared/") {
				if strings.Contains(k, "_shared-"+ns+"-nightly-") && strings.HasSuffix(k, ".manifest.json") {
					n++
				}
			}
			return n
		}
		eventually(t, "a keeps 3 and b keeps 1", func() bool { return count("a") == 3 && count("b") == 1 })
		// kubectl describe shows the Events whose object has the UID of
		// the object described.
		var bc v1alpha1.EtcdBackupConfig
		if err := c.Get(ctx, types.NamespacedName{Namespace: "a", Name: "nightly"}, &bc); err != nil {
			t.Fatal(err)
		}
		var list eventsv1.EventList
		if err := c.List(ctx, &list, client.InNamespace("a")); err != nil {
			t.Fatal(err)
		}
		completed := 0
		for _, e := range list.Items {
			if e.Reason == "BackupCompleted" && e.Regarding.Name == "nightly" {
				completed++
				if e.Regarding.UID != bc.UID {
					t.Errorf("event %s about config a/nightly has UID %q, want %q", e.Reason, e.Regarding.UID, bc.UID)
				}
			}
		}
		if completed == 0 {
			t.Error("no BackupCompleted event about config a/nightly")
		}
		for _, ns := range []string{"a", "b"} {
			if err := c.Delete(ctx, keep(ns, 0)); err != nil {
				t.Fatal(err)
			}
		}
		sa, sb := oneShot("a", "once", "shared"), oneShot("b", "once", "shared")
		if sa.Phase != v1alpha1.PhaseCompleted || sb.Phase != v1alpha1.PhaseCompleted || sa.BackupID == sb.BackupID {
			t.Errorf("one-shot backups of the same name in two namespaces: %+v, %+v", sa, sb)
		}
		// Deleted and created again, the object takes another backup.
		if err := c.Delete(ctx, &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "once"}}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the backup object is gone", func() bool {
			return apierrors.IsNotFound(c.Get(ctx, types.NamespacedName{Namespace: "a", Name: "once"}, &v1alpha1.EtcdBackup{}))
		})
		if again := oneShot("a", "once", "shared"); again.Phase != v1alpha1.PhaseCompleted || again.BackupID == sa.BackupID {
			t.Errorf("the backup object created again: %+v", again)
		}
	})

	t.Run("a lost status update finds the backup on the destination", func(t *testing.T) {
		create(t, c, cluster("lost", []string{endpoint}))
		first := oneShot("default", "lost", "lost")
		if first.Phase != v1alpha1.PhaseCompleted {
			t.Fatalf("backup: %+v", first)
		}
		// The status as a controller that stopped after the upload left it.
		var b v1alpha1.EtcdBackup
		if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "lost"}, &b); err != nil {
			t.Fatal(err)
		}
		b.Status = v1alpha1.EtcdBackupStatus{Phase: v1alpha1.PhaseRunning, StartTime: b.Status.StartTime}
		if err := c.Status().Update(ctx, &b); err != nil {
			t.Fatal(err)
		}
		st := waitBackup(t, c, "default", "lost")
		if st.Phase != v1alpha1.PhaseCompleted || st.BackupID != first.BackupID {
			t.Errorf("after the lost update: %+v, want Completed with %s", st, first.BackupID)
		}
		if got := condition(st.Conditions, v1alpha1.ConditionSucceeded); got.Status != metav1.ConditionTrue || st.ObservedGeneration != b.Generation {
			t.Errorf("Succeeded = %+v, observed generation %d", got, st.ObservedGeneration)
		}
		if n := manifests(t, s3, "main", "lost"); n != 1 {
			t.Errorf("%d backups, want 1", n)
		}
	})

	t.Run("a refused destination is refused alone", func(t *testing.T) {
		// The manager has no GCS driver: the registry refuses gs://.
		create(t, c, dest("cloud", "gs://bucket/backups", ""), dest("second", s3.bucket(t, "second"), "minio"))
		eventually(t, "second accepted, cloud refused", func() bool {
			return condition(getDest(t, c, "second").Status.Conditions, v1alpha1.ConditionAccepted).Status == metav1.ConditionTrue &&
				condition(getDest(t, c, "cloud").Status.Conditions, v1alpha1.ConditionAccepted).Reason == "NoDriver"
		})
		if got := condition(getDest(t, c, "default").Status.Conditions, v1alpha1.ConditionAccepted); got.Status != metav1.ConditionTrue {
			t.Errorf("default: Accepted = %+v", got)
		}
	})
}

// waitBackup waits until an EtcdBackup ended and returns its status.
func waitBackup(t *testing.T, c client.Client, ns, name string) v1alpha1.EtcdBackupStatus {
	t.Helper()
	var b v1alpha1.EtcdBackup
	eventually(t, "backup "+ns+"/"+name+" ends", func() bool {
		if err := c.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &b); err != nil {
			t.Fatal(err)
		}
		return b.Status.Phase == v1alpha1.PhaseCompleted || b.Status.Phase == v1alpha1.PhaseFailed
	})
	return b.Status
}
