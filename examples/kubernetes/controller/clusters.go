package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/schedule"
)

// Finalizer is set on every EtcdCluster whose deletionPolicy is Delete:
// its removal waits until the cluster's backups are deleted.
const Finalizer = "backup.etcdbackup.io/teardown"

// DefaultTeardownTimeout is how long a teardown retries a destination
// whose backups it cannot delete before it leaves them (see
// EtcdClusterSpec.TeardownTimeout).
const DefaultTeardownTimeout = time.Hour

// errTornDown refuses backups of a cluster being deleted.
var errTornDown = errors.New("cluster is being deleted")

// clusters keeps a finalizer on every EtcdCluster whose deletionPolicy is
// Delete and, when one is deleted, stops its jobs and, after its grace
// period, deletes its backups from every writable destination.
type clusters struct {
	client    client.Client
	events    recorder
	registry  *destination.Registry
	scheduler *schedule.Scheduler
	pins      *retention.PinSet
	configs   *configs
	loaded    *gate
	now       func() time.Time

	mu       sync.Mutex
	tornDown map[string]bool // clusters whose teardown began
}

func (c *clusters) setup(mgr ctrl.Manager) error {
	c.tornDown = map[string]bool{}
	return ctrl.NewControllerManagedBy(mgr).For(&v1alpha1.EtcdCluster{}).Complete(c)
}

// unlessTornDown runs set unless the cluster is being deleted.
func (c *clusters) unlessTornDown(cl *v1alpha1.EtcdCluster, set func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tornDown[cl.Name] || !cl.DeletionTimestamp.IsZero() {
		return fmt.Errorf("%w: cluster %s", errTornDown, cl.Name)
	}
	return set()
}

// snapshotter returns the snapshotter of a cluster's etcd, read from its
// EtcdCluster at each run: a changed endpoint list is used by the next
// backup, and a cluster being deleted is backed up no more.
func (c *clusters) snapshotter(ctx context.Context, name string) (backup.Snapshotter, error) {
	c.mu.Lock()
	gone := c.tornDown[name]
	c.mu.Unlock()
	if gone {
		return nil, fmt.Errorf("%w: cluster %s", errTornDown, name)
	}
	var cl v1alpha1.EtcdCluster
	if err := c.client.Get(ctx, types.NamespacedName{Name: name}, &cl); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: cluster %s not found", errNoCluster, name)
		}
		return nil, err
	}
	if !cl.DeletionTimestamp.IsZero() {
		return nil, fmt.Errorf("%w: cluster %s", errTornDown, name)
	}
	return backup.NewEtcdSnapshotter(etcdConfig(&cl.Spec))
}

// etcdConfig is the snapshotter configuration of a cluster.
func etcdConfig(s *v1alpha1.EtcdClusterSpec) backup.EtcdConfig {
	cfg := backup.EtcdConfig{Endpoints: s.Endpoints}
	if t := s.TLS; t != nil {
		cfg.TLS = &transport.TLSInfo{TrustedCAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName}
	}
	return cfg
}

func (c *clusters) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var cl v1alpha1.EtcdCluster
	if err := c.client.Get(ctx, req.NamespacedName, &cl); err != nil {
		if apierrors.IsNotFound(err) {
			c.forget(req.Name) // torn down and gone: a new cluster may take the name
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	deleteBackups := cl.Spec.DeletionPolicy == v1alpha1.DeletionDelete
	if cl.DeletionTimestamp.IsZero() {
		c.forget(cl.Name) // a new cluster of the name of one torn down before
		// Retain needs no finalizer: a cluster of an older version, or
		// one switched to Retain, loses it.
		changed := controllerutil.RemoveFinalizer(&cl, Finalizer)
		if deleteBackups {
			changed = controllerutil.AddFinalizer(&cl, Finalizer)
		}
		if changed {
			return reconcile.Result{}, c.client.Update(ctx, &cl)
		}
		return reconcile.Result{}, nil
	}
	if !controllerutil.ContainsFinalizer(&cl, Finalizer) {
		return reconcile.Result{}, nil
	}
	c.stop(cl.Name)
	if !deleteBackups {
		// Set back to Retain during the grace period: the backups stay.
		c.events.Eventf(&cl, nil, corev1.EventTypeNormal, "BackupsKept", "Teardown",
			"deletion policy Retain: the backups of cluster %s stay on every destination", cl.Name)
		return c.release(ctx, &cl)
	}
	if !c.loaded.isOpen() {
		return reconcile.Result{RequeueAfter: waitAgain}, nil // an empty registry would delete nothing
	}
	start := cl.DeletionTimestamp.Add(duration(cl.Spec.DeletionGracePeriod, 0))
	if wait := start.Sub(c.now()); wait > 0 {
		return c.tornDownStatus(ctx, &cl, metav1.ConditionFalse, "GracePeriod", fmt.Sprintf(
			"the backups of cluster %s are deleted at %s, unless deletionPolicy is set to Retain before",
			cl.Name, start.UTC().Format(time.RFC3339)), wait)
	}
	deadline := start.Add(duration(cl.Spec.TeardownTimeout, DefaultTeardownTimeout))
	if err := c.teardown(ctx, &cl, c.now().After(deadline)); err != nil {
		if condition(cl.Status.Conditions, v1alpha1.ConditionTornDown).Message != err.Error() {
			c.events.Eventf(&cl, nil, corev1.EventTypeWarning, "TeardownFailed", "Teardown", "%s", err.Error())
		}
		// Again in a minute, or just after the deadline.
		again := min(time.Minute, max(deadline.Sub(c.now())+time.Second, waitAgain))
		return c.tornDownStatus(ctx, &cl, metav1.ConditionFalse, "DeleteFailed", err.Error(), again)
	}
	return c.release(ctx, &cl)
}

// release removes the finalizer of a cluster being deleted.
func (c *clusters) release(ctx context.Context, cl *v1alpha1.EtcdCluster) (reconcile.Result, error) {
	controllerutil.RemoveFinalizer(cl, Finalizer)
	return reconcile.Result{}, client.IgnoreNotFound(c.client.Update(ctx, cl))
}

// tornDownStatus sets a cluster's TornDown condition and looks at it again
// after requeue.
func (c *clusters) tornDownStatus(ctx context.Context, cl *v1alpha1.EtcdCluster, status metav1.ConditionStatus, reason, message string, requeue time.Duration) (reconcile.Result, error) {
	before := cl.Status.DeepCopy()
	cl.Status.ObservedGeneration = cl.Generation
	meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionTornDown,
		Status: status, Reason: reason, Message: message, ObservedGeneration: cl.Generation})
	if !equalStatus(before, &cl.Status) {
		if err := c.client.Status().Update(ctx, cl); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// condition returns the condition of a type, or the zero one.
func condition(conds []metav1.Condition, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// duration is d's, or def when d is nil.
func duration(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}

// destinationObject is the BackupDestination of a name, for Events.
func destinationObject(name string) *v1alpha1.BackupDestination {
	return &v1alpha1.BackupDestination{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "BackupDestination"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}
}

func (c *clusters) forget(name string) {
	c.mu.Lock()
	delete(c.tornDown, name)
	c.mu.Unlock()
}

// stop marks a cluster torn down: it is backed up no more, and its
// configs get no new job.
func (c *clusters) stop(name string) {
	c.mu.Lock()
	c.tornDown[name] = true
	c.mu.Unlock()
}

// teardown stops the cluster's jobs, then deletes its backups from every
// destination that may be written. Read-only destinations keep theirs;
// object-locked backups stay until their locks expire (an Event says how
// many). With giveUp, a destination whose backups cannot be deleted is
// left as it is, with a Warning Event, instead of failing the teardown.
func (c *clusters) teardown(ctx context.Context, cl *v1alpha1.EtcdCluster, giveUp bool) error {
	var list v1alpha1.EtcdBackupConfigList
	if err := c.client.List(ctx, &list, client.MatchingFields{indexCluster: cl.Name}); err != nil {
		return err
	}
	for _, bc := range list.Items {
		if err := c.configs.remove(ctx, jobID(client.ObjectKeyFromObject(&bc))); err != nil {
			return err
		}
	}
	var errs []error
	for _, d := range c.registry.List() {
		// The destination is the Events' related object: Events of one
		// reason about one cluster would otherwise merge into one series.
		related := realObject(ctx, c.client, destinationObject(d.Name()))
		if d.ReadOnly() {
			c.events.Eventf(cl, related, corev1.EventTypeNormal, "BackupsKept", "Teardown",
				"destination %s is read-only: its backups of cluster %s stay", d.Name(), cl.Name)
			continue
		}
		t := retention.Teardown{Store: d, Destination: d.Name(), Pins: c.pins}
		report, err := t.Run(ctx, cl.Name)
		if err != nil && giveUp {
			c.events.Eventf(cl, related, corev1.EventTypeWarning, "BackupsLeft", "Teardown",
				"destination %s: the backups of cluster %s are left in place, the teardown timed out: %v", d.Name(), cl.Name, err)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("destination %s: %w", d.Name(), err))
			continue
		}
		deleted, kept := 0, 0
		for _, it := range report.Items {
			switch it.Outcome {
			case retention.Deleted:
				deleted++
			case retention.Kept, retention.Skipped:
				kept++
			}
		}
		c.events.Eventf(cl, related, corev1.EventTypeNormal, "BackupsDeleted", "Teardown",
			"destination %s: %d objects of cluster %s deleted, %d kept (object locks, pins or foreign objects)", d.Name(), deleted, cl.Name, kept)
	}
	return errors.Join(errs...)
}
