package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/retention"
)

// published is a restore beside the members whose plan of backup id the
// controller published.
func published(uid types.UID, id string) *v1alpha1.EtcdRestore {
	plan := &v1alpha1.RestorePlan{Destination: "main", URL: "s3://b", BackupID: id, InitialCluster: "m0=http://m0:2380"}
	return &v1alpha1.EtcdRestore{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "beside", UID: uid,
			Annotations: map[string]string{v1alpha1.PlanDigestAnnotation: plan.Digest()}},
		Spec:   v1alpha1.EtcdRestoreSpec{Cluster: "c", Members: []v1alpha1.PlannedMember{{Name: "m0", PeerURLs: []string{"http://m0:2380"}}}},
		Status: v1alpha1.EtcdRestoreStatus{Phase: v1alpha1.PhaseRunning, Plan: plan, BackupID: id, Destination: "main"},
	}
}

// TestRestorePinsPerUID: a restore deleted and created again under its
// name, before the controller saw it go, pins its own plan's backup, and
// the pins of the deleted one go.
func TestRestorePinsPerUID(t *testing.T) {
	pins := &retention.PinSet{}
	r := &restores{pins: pins, held: map[types.UID]heldPlan{}}
	old, again := published("uid-1", "old"), published("uid-2", "again")
	r.hold(old, old.Status.Plan)
	r.releaseOthers(client.ObjectKeyFromObject(again), again.UID)
	r.hold(again, again.Status.Plan)
	if !pins.Pinned("c", "again") || pins.Pinned("c", "old") {
		t.Fatalf("pinned: again %v, old %v; want the new restore's backup only", pins.Pinned("c", "again"), pins.Pinned("c", "old"))
	}
	r.releaseOthers(client.ObjectKeyFromObject(again), "")
	if pins.Pinned("c", "again") {
		t.Fatal("the pins of a deleted restore stay")
	}
}

// TestRestorePinsBeforeDestinationsLoad: a controller that just became
// the leader pins the backups of a published plan at once, before the
// destinations are loaded, and leaves the restore Running.
func TestRestorePinsBeforeDestinationsLoad(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	rs := published("uid-1", "full")
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&v1alpha1.EtcdRestore{}).WithObjects(rs).Build()
	pins := &retention.PinSet{}
	r := &restores{client: c, pins: pins, held: map[types.UID]heldPlan{}, loaded: newGate()}
	if _, err := r.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(rs)}); err != nil {
		t.Fatal(err)
	}
	if !pins.Pinned("c", "full") {
		t.Error("the published plan's backup is not pinned while the destinations load")
	}
	var got v1alpha1.EtcdRestore
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(rs), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1alpha1.PhaseRunning {
		t.Errorf("phase %s (%s), want Running", got.Status.Phase, got.Status.Message)
	}
}
