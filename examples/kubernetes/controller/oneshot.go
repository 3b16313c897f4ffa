package controller

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/restore"
)

// oneShots runs each EtcdBackup once through a backup.Pipeline.
type oneShots struct {
	client   client.Client
	events   recorder
	registry *destination.Registry
	clusters *clusters
	metrics  *backup.Metrics
	now      func() time.Time
	log      *slog.Logger
	loaded   *gate
}

func (o *oneShots) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&v1alpha1.EtcdBackup{}).Complete(o)
}

// waitAgain is how soon a backup or restore waiting for its cluster or
// destination looks again.
const waitAgain = 2 * time.Second

// phaseStatus points into the status an EtcdBackup and an EtcdRestore
// share: a phase, its message, and the Succeeded condition.
type phaseStatus struct {
	phase      *v1alpha1.Phase
	message    *string
	conditions *[]metav1.Condition
	observed   *int64
}

// set sets the phase, its message and the Succeeded condition: Unknown
// until the phase is Completed (True) or Failed (False).
func (s phaseStatus) set(gen int64, p v1alpha1.Phase, message string) {
	*s.phase, *s.message, *s.observed = p, message, gen
	c := metav1.Condition{Type: v1alpha1.ConditionSucceeded, Status: metav1.ConditionUnknown,
		Reason: string(p), Message: message, ObservedGeneration: gen}
	switch p {
	case v1alpha1.PhaseCompleted:
		c.Status = metav1.ConditionTrue
	case v1alpha1.PhaseFailed:
		c.Status = metav1.ConditionFalse
	}
	meta.SetStatusCondition(s.conditions, c)
}

func backupStatus(b *v1alpha1.EtcdBackup) phaseStatus {
	return phaseStatus{&b.Status.Phase, &b.Status.Message, &b.Status.Conditions, &b.Status.ObservedGeneration}
}

// wait marks obj, whose status st points into, Pending for why, and has it
// looked at again after waitAgain.
func wait(ctx context.Context, c client.Client, obj client.Object, st phaseStatus, why error) (reconcile.Result, error) {
	if msg := "waiting: " + why.Error(); *st.phase != v1alpha1.PhasePending || *st.message != msg {
		st.set(obj.GetGeneration(), v1alpha1.PhasePending, msg)
		if err := c.Status().Update(ctx, obj); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	return reconcile.Result{RequeueAfter: waitAgain}, nil
}

// waitsFor reports whether err says something is not known yet, rather
// than wrong: a backup or a restore stays Pending while it is so.
func waitsFor(err error) bool {
	return errors.Is(err, errNotLoaded) || errors.Is(err, errNoCluster) ||
		errors.Is(err, destination.ErrNotFound) || errors.Is(err, destination.ErrNoDefault)
}

// Reconcile runs a backup that has not ended. A backup whose cluster or
// destination is not known yet (created in the same apply and not seen
// yet, or destinations not loaded since the controller started) stays
// Pending until they are. The backup's ID is the object's own (see
// backupName): one that started before (left Running by a lost status
// update, or by a controller that stopped after the upload) is looked for
// on the destination first, and Completed if it is there.
func (o *oneShots) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var b v1alpha1.EtcdBackup
	if err := o.client.Get(ctx, req.NamespacedName, &b); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !b.DeletionTimestamp.IsZero() || b.Status.Phase == v1alpha1.PhaseCompleted || b.Status.Phase == v1alpha1.PhaseFailed {
		return reconcile.Result{}, nil
	}
	snap, d, err := o.resolve(ctx, &b)
	if waitsFor(err) {
		return wait(ctx, o.client, &b, backupStatus(&b), err)
	}
	name := backupName(b.Namespace, b.Name, string(b.UID))
	if err == nil && b.Status.StartTime != nil {
		// It ran before: its outcome may be on the destination.
		if found, ferr := o.find(ctx, d, b.Spec.Cluster, name); ferr != nil {
			return reconcile.Result{}, ferr // the destination cannot say: ask again
		} else if found != nil {
			return o.end(ctx, &b, found, nil)
		}
	}
	// Update, not Patch: a cache that has not seen the end of the last
	// run yet holds an old resourceVersion, and the conflict stops a
	// second run.
	backupStatus(&b).set(b.Generation, v1alpha1.PhaseRunning, "")
	b.Status.StartTime = now(o.now)
	if err := o.client.Status().Update(ctx, &b); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var res *backup.Result
	if err == nil {
		res, err = o.run(ctx, &b, name, snap, d)
	}
	if err != nil && ctx.Err() != nil {
		return reconcile.Result{}, ctx.Err() // stopped: the next leader runs it, or finds it
	}
	if err != nil && d != nil {
		// The ID is this object's: a backup under it was written by an
		// earlier run of it, whose status was lost.
		if found, ferr := o.find(ctx, d, b.Spec.Cluster, name); ferr == nil && found != nil {
			return o.end(ctx, &b, found, nil)
		}
	}
	var found *backup.Entry
	if res != nil {
		found = &backup.Entry{ID: res.ID, Size: res.Stored.Size}
	}
	return o.end(ctx, &b, found, err)
}

// end writes a backup's outcome: Completed with the entry found or
// written, or Failed with err.
func (o *oneShots) end(ctx context.Context, b *v1alpha1.EtcdBackup, e *backup.Entry, err error) (reconcile.Result, error) {
	b.Status.CompletionTime = now(o.now)
	if e != nil {
		b.Status.BackupID, b.Status.StoredBytes = e.ID, e.Size
	}
	if err != nil {
		backupStatus(b).set(b.Generation, v1alpha1.PhaseFailed, err.Error())
	} else {
		backupStatus(b).set(b.Generation, v1alpha1.PhaseCompleted, "")
	}
	return reconcile.Result{}, client.IgnoreNotFound(o.client.Status().Update(ctx, b))
}

// find returns the restorable backup of the object's ID on d, or nil when
// there is none.
func (o *oneShots) find(ctx context.Context, d *destination.Destination, cluster, name string) (*backup.Entry, error) {
	id := backup.BackupID(cluster, name, time.Time{}, false)
	found, err := restore.Find(ctx, []restore.Source{{Name: d.Name(), Catalog: d}}, restore.Query{Cluster: cluster, ID: id})
	switch {
	case errors.Is(err, restore.ErrNoBackup):
		return nil, nil
	case err != nil:
		return nil, err
	case found.Kind != backup.KindBackup || found.ID != id:
		return nil, nil
	}
	return &found.Entry, nil
}

// resolve returns the snapshotter of b's cluster and b's destination.
func (o *oneShots) resolve(ctx context.Context, b *v1alpha1.EtcdBackup) (backup.Snapshotter, *destination.Destination, error) {
	if !o.loaded.isOpen() {
		return nil, nil, errNotLoaded
	}
	snap, err := o.clusters.snapshotter(ctx, b.Spec.Cluster)
	if err != nil {
		return nil, nil, err
	}
	var d *destination.Destination
	if b.Spec.Destination == "" {
		d, err = o.registry.Default()
	} else {
		d, err = o.registry.Get(b.Spec.Destination)
	}
	return snap, d, err
}

func (o *oneShots) run(ctx context.Context, b *v1alpha1.EtcdBackup, name string, snap backup.Snapshotter, d *destination.Destination) (*backup.Result, error) {
	if d.ReadOnly() {
		return nil, destination.ErrReadOnly
	}
	req := backup.Request{Cluster: b.Spec.Cluster, Job: b.Namespace + "/" + b.Name, Name: name, Targets: []backup.Target{d.Target()}}
	if backupKind(b.Spec.Type) == backup.KindKeysJSON {
		cli, err := clientOf(ctx, snap)
		if err != nil {
			return nil, err
		}
		defer cli.Close()
		snap = &backup.KeysExporter{Client: cli, Prefixes: b.Spec.Prefixes, Now: o.now}
		req.Kind = backup.ManifestKindKeysJSON
	}
	p := &backup.Pipeline{
		Snapshotter: snap,
		Compression: backup.Compression(b.Spec.Compression),
		Encryption:  backup.Encryption{Recipients: b.Spec.Recipients},
		Observer:    backup.Observers{o.metrics, &backupEvents{events: o.events, obj: b}},
		Logger:      o.log,
		Now:         o.now,
	}
	res, err := p.Run(ctx, req)
	if err == nil && len(res.Succeeded()) == 0 {
		err = errors.New("no destination stored the backup")
		if out := res.Outcomes; len(out) == 1 && out[0].Err != nil {
			err = out[0].Err
		}
	}
	return res, err
}

func now(f func() time.Time) *metav1.Time {
	t := metav1.NewTime(f())
	return &t
}
