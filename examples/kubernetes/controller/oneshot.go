package controller

import (
	"context"
	"errors"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
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
}

func (o *oneShots) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&v1alpha1.EtcdBackup{}).Complete(o)
}

// waitAgain is how soon a backup or restore waiting for its cluster or
// destination looks again.
const waitAgain = 2 * time.Second

// wait marks obj, whose status phase and message are given, Pending for
// why, and has it looked at again after waitAgain.
func wait(ctx context.Context, c client.Client, obj client.Object, phase *v1alpha1.Phase, message *string, why error) (reconcile.Result, error) {
	if msg := "waiting: " + why.Error(); *phase != v1alpha1.PhasePending || *message != msg {
		*phase, *message = v1alpha1.PhasePending, msg
		if err := c.Status().Update(ctx, obj); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	return reconcile.Result{RequeueAfter: waitAgain}, nil
}

// Reconcile runs a backup that has not ended. One interrupted by a
// restart of the controller (left Running) runs again: a backup becomes
// visible only when complete, so a second run writes a whole new one. A
// backup whose cluster or destination does not exist yet (created in the
// same apply, and not seen yet) stays Pending until they do.
func (o *oneShots) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var b v1alpha1.EtcdBackup
	if err := o.client.Get(ctx, req.NamespacedName, &b); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !b.DeletionTimestamp.IsZero() || b.Status.Phase == v1alpha1.PhaseCompleted || b.Status.Phase == v1alpha1.PhaseFailed {
		return reconcile.Result{}, nil
	}
	snap, d, err := o.resolve(ctx, &b)
	if errors.Is(err, errNoCluster) || errors.Is(err, destination.ErrNotFound) {
		return wait(ctx, o.client, &b, &b.Status.Phase, &b.Status.Message, err)
	}
	// Update, not Patch: a cache that has not seen the end of the last
	// run yet holds an old resourceVersion, and the conflict stops a
	// second run.
	b.Status.Phase, b.Status.Message, b.Status.StartTime = v1alpha1.PhaseRunning, "", now(o.now)
	if err := o.client.Status().Update(ctx, &b); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var res *backup.Result
	if err == nil {
		res, err = o.run(ctx, &b, snap, d)
	}
	b.Status.CompletionTime = now(o.now)
	if res != nil {
		b.Status.BackupID = res.ID
		b.Status.StoredBytes = res.Stored.Size
	}
	if err != nil {
		if ctx.Err() != nil {
			return reconcile.Result{}, ctx.Err() // stopped: the next leader runs it
		}
		b.Status.Phase, b.Status.Message = v1alpha1.PhaseFailed, err.Error()
	} else {
		b.Status.Phase, b.Status.Message = v1alpha1.PhaseCompleted, ""
	}
	return reconcile.Result{}, client.IgnoreNotFound(o.client.Status().Update(ctx, &b))
}

// resolve returns the snapshotter of b's cluster and b's destination.
func (o *oneShots) resolve(ctx context.Context, b *v1alpha1.EtcdBackup) (backup.Snapshotter, *destination.Destination, error) {
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

func (o *oneShots) run(ctx context.Context, b *v1alpha1.EtcdBackup, snap backup.Snapshotter, d *destination.Destination) (*backup.Result, error) {
	if d.ReadOnly() {
		return nil, destination.ErrReadOnly
	}
	p := &backup.Pipeline{
		Snapshotter: snap,
		Compression: backup.Compression(b.Spec.Compression),
		Encryption:  backup.Encryption{Recipients: b.Spec.Recipients},
		Observer:    backup.Observers{o.metrics, &backupEvents{events: o.events, obj: b}},
		Logger:      o.log,
		Now:         o.now,
	}
	res, err := p.Run(ctx, backup.Request{Cluster: b.Spec.Cluster, Name: b.Name, Targets: []backup.Target{d.Target()}})
	if err == nil && len(res.Succeeded()) == 0 {
		err = errors.New("no destination stored the backup")
	}
	return res, err
}

func now(f func() time.Time) *metav1.Time {
	t := metav1.NewTime(f())
	return &t
}
