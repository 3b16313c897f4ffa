package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/restore"
)

// reconcilePlan drives a restore beside each member: it publishes the
// plan once (the backups named exactly, so that every member restores the
// same data), keeps those backups pinned against retention while the
// members read them, and completes once every member's restore step
// reported success. A member that reported a failure leaves the restore
// Running with the failure in its message: its init container runs again.
func (r *restores) reconcilePlan(ctx context.Context, rs *v1alpha1.EtcdRestore, st phaseStatus) (reconcile.Result, error) {
	if rs.Status.Plan == nil {
		return r.publishPlan(ctx, rs, st)
	}
	if msg := r.checkPlan(rs); msg != "" {
		st.set(rs.Generation, v1alpha1.PhaseFailed, msg)
		rs.Status.CompletionTime = now(r.now)
		if err := r.client.Status().Update(ctx, rs); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		r.release(rs.UID)
		return reconcile.Result{}, nil
	}
	r.hold(rs, rs.Status.Plan)
	var done int
	var failed []string
	for _, m := range rs.Spec.Members {
		i := slices.IndexFunc(rs.Status.Members, func(s v1alpha1.MemberRestoreStatus) bool { return s.Name == m.Name })
		switch {
		case i < 0:
		case rs.Status.Members[i].Phase == v1alpha1.PhaseCompleted:
			done++
		case rs.Status.Members[i].Phase == v1alpha1.PhaseFailed:
			failed = append(failed, m.Name+": "+rs.Status.Members[i].Message)
		}
	}
	if done < len(rs.Spec.Members) {
		msg := fmt.Sprintf("waiting for the restore step of each member: %d of %d restored", done, len(rs.Spec.Members))
		if len(failed) > 0 {
			msg += "; failed: " + strings.Join(failed, "; ")
		}
		if msg == rs.Status.Message {
			return reconcile.Result{}, nil
		}
		st.set(rs.Generation, v1alpha1.PhaseRunning, msg)
		return reconcile.Result{}, client.IgnoreNotFound(r.client.Status().Update(ctx, rs))
	}
	st.set(rs.Generation, v1alpha1.PhaseCompleted, "")
	rs.Status.CompletionTime = now(r.now)
	if err := r.client.Status().Update(ctx, rs); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	r.release(rs.UID)
	return reconcile.Result{}, nil
}

// publishPlan resolves a restore's plan, records its digest in the
// restore's annotation (which the members, who may write the status,
// cannot change), then publishes it in the status.
func (r *restores) publishPlan(ctx context.Context, rs *v1alpha1.EtcdRestore, st phaseStatus) (reconcile.Result, error) {
	plan, err := r.plan(ctx, rs)
	if err != nil {
		if ctx.Err() != nil {
			return reconcile.Result{}, ctx.Err()
		}
		st.set(rs.Generation, v1alpha1.PhaseFailed, err.Error())
		rs.Status.CompletionTime = now(r.now)
		return reconcile.Result{}, client.IgnoreNotFound(r.client.Status().Update(ctx, rs))
	}
	status := rs.Status.DeepCopy() // plan may have set the gap
	before := rs.DeepCopy()
	if rs.Annotations == nil {
		rs.Annotations = map[string]string{}
	}
	rs.Annotations[v1alpha1.PlanDigestAnnotation] = plan.Digest()
	if err := r.client.Patch(ctx, rs, client.MergeFrom(before)); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	rs.Status = *status
	r.hold(rs, plan)
	rs.Status.Plan, rs.Status.BackupID, rs.Status.Destination = plan, plan.BackupID, plan.Destination
	rs.Status.StartTime = now(r.now)
	st.set(rs.Generation, v1alpha1.PhaseRunning, "waiting for the restore step of each member")
	if err := r.client.Status().Update(ctx, rs); err != nil {
		r.release(rs.UID)
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	return reconcile.Result{}, nil
}

// checkPlan says what is wrong with a published plan: a status.plan or a
// member's report that is not the plan whose digest the controller
// recorded. It returns "" when nothing is.
func (r *restores) checkPlan(rs *v1alpha1.EtcdRestore) string {
	want := rs.Annotations[v1alpha1.PlanDigestAnnotation]
	if want == "" || rs.Status.Plan.Digest() != want {
		return "status.plan is not the plan the controller published (digest " + want + "): it was changed"
	}
	if rs.Status.BackupID != rs.Status.Plan.BackupID || rs.Status.Destination != rs.Status.Plan.Destination {
		return "status.backupID or status.destination is not the published plan's: it was changed"
	}
	for _, m := range rs.Status.Members {
		if m.Phase == v1alpha1.PhaseCompleted && m.PlanDigest != want {
			return fmt.Sprintf("member %s reported restoring plan %q, not the published plan %s", m.Name, m.PlanDigest, want)
		}
	}
	return ""
}

// plan resolves what a restore beside the members restores: the full
// backup, or the point's full backup and segments, on one destination.
func (r *restores) plan(ctx context.Context, rs *v1alpha1.EtcdRestore) (*v1alpha1.RestorePlan, error) {
	members := restore.Cluster{Token: rs.Spec.ClusterToken, RevisionBump: uint64(max(rs.Spec.RevisionBump, 0))}
	for _, m := range rs.Spec.Members {
		// The data directories are the restore steps'; Validate wants one.
		members.Members = append(members.Members, restore.ClusterMember{Name: m.Name, DataDir: "/" + m.Name, PeerURLs: m.PeerURLs})
	}
	if err := members.Validate(); err != nil {
		return nil, err
	}
	sources, err := r.sources(rs)
	if err != nil {
		return nil, err
	}
	plan := &v1alpha1.RestorePlan{ClusterToken: rs.Spec.ClusterToken, RevisionBump: rs.Spec.RevisionBump}
	var parts []string
	for _, m := range rs.Spec.Members {
		for _, u := range m.PeerURLs {
			parts = append(parts, m.Name+"="+u)
		}
	}
	plan.InitialCluster = strings.Join(parts, ",")
	if point, ok := restorePoint(&rs.Spec); ok {
		pp, err := restore.FindPoint(ctx, sources, point)
		if err != nil {
			return nil, err
		}
		plan.Destination, plan.BackupID, plan.Revision = pp.Full.Source, pp.Full.ID, pp.Revision
		if !pp.Time.IsZero() {
			t := metav1.NewTime(pp.Time)
			plan.Time = &t
		}
		for _, s := range pp.Segments {
			if s.Source != pp.Full.Source {
				return nil, errors.New("the point's segments are on several destinations: name one")
			}
			plan.Segments = append(plan.Segments, s.ID)
		}
		if pp.Gap != nil {
			rs.Status.Gap = pp.Gap.Error()
		}
	} else {
		q := restore.Query{Cluster: rs.Spec.Cluster, ID: rs.Spec.BackupID}
		if rs.Spec.Before != nil {
			q.Before = rs.Spec.Before.Time
		}
		b, err := restore.Find(ctx, sources, q)
		if err != nil {
			return nil, err
		}
		plan.Destination, plan.BackupID = b.Source, b.ID
	}
	var bd v1alpha1.BackupDestination
	if err := r.client.Get(ctx, types.NamespacedName{Name: plan.Destination}, &bd); err != nil {
		return nil, fmt.Errorf("destination %s: %w", plan.Destination, err)
	}
	plan.URL = bd.Spec.URL
	return plan, nil
}

// hold pins a plan's backups until release, once per restore.
func (r *restores) hold(rs *v1alpha1.EtcdRestore, plan *v1alpha1.RestorePlan) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.held[rs.UID]; ok || r.pins == nil {
		return
	}
	unpins := []func(){r.pins.Pin(rs.Spec.Cluster, plan.BackupID)}
	for _, id := range plan.Segments {
		unpins = append(unpins, r.pins.Pin(rs.Spec.Cluster, id))
	}
	r.held[rs.UID] = heldPlan{name: client.ObjectKeyFromObject(rs), unpin: func() {
		for _, u := range unpins {
			u()
		}
	}}
}

// release unpins what hold pinned for a restore.
func (r *restores) release(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h, ok := r.held[uid]; ok {
		h.unpin()
		delete(r.held, uid)
	}
}

// releaseOthers unpins what hold pinned for the restores named name
// other than the one of UID keep: they were deleted.
func (r *restores) releaseOthers(name types.NamespacedName, keep types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid, h := range r.held {
		if h.name == name && uid != keep {
			h.unpin()
			delete(r.held, uid)
		}
	}
}
