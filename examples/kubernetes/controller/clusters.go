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

// Finalizer is set on every EtcdCluster: its removal waits until the
// cluster's backups are deleted.
const Finalizer = "backup.etcdbackup.io/teardown"

// errTornDown refuses backups of a cluster being deleted.
var errTornDown = errors.New("cluster is being deleted")

// clusters keeps a finalizer on every EtcdCluster and, when one is
// deleted, stops its jobs and deletes its backups from every writable
// destination.
type clusters struct {
	client    client.Client
	events    recorder
	registry  *destination.Registry
	scheduler *schedule.Scheduler
	pins      *retention.PinSet
	configs   *configs

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
	if cl.DeletionTimestamp.IsZero() {
		c.forget(cl.Name) // a new cluster of the name of one torn down before
		if controllerutil.AddFinalizer(&cl, Finalizer) {
			return reconcile.Result{}, c.client.Update(ctx, &cl)
		}
		return reconcile.Result{}, nil
	}
	if !controllerutil.ContainsFinalizer(&cl, Finalizer) {
		return reconcile.Result{}, nil
	}
	if err := c.teardown(ctx, &cl); err != nil {
		before := cl.Status.DeepCopy()
		meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionTornDown,
			Status: metav1.ConditionFalse, Reason: "DeleteFailed", Message: err.Error()})
		if !equalStatus(before, &cl.Status) {
			c.events.Eventf(&cl, nil, corev1.EventTypeWarning, "TeardownFailed", "Teardown", "%s", err.Error())
			if uerr := c.client.Status().Update(ctx, &cl); uerr != nil {
				return reconcile.Result{}, errors.Join(err, uerr)
			}
		}
		return reconcile.Result{RequeueAfter: time.Minute}, nil
	}
	controllerutil.RemoveFinalizer(&cl, Finalizer)
	return reconcile.Result{}, client.IgnoreNotFound(c.client.Update(ctx, &cl))
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

// teardown stops the cluster's jobs, then deletes its backups from every
// destination that may be written. Read-only destinations keep theirs;
// object-locked backups stay until their locks expire (an Event says how
// many).
func (c *clusters) teardown(ctx context.Context, cl *v1alpha1.EtcdCluster) error {
	c.mu.Lock()
	c.tornDown[cl.Name] = true
	c.mu.Unlock()

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
		related := destinationObject(d.Name())
		if d.ReadOnly() {
			c.events.Eventf(cl, related, corev1.EventTypeNormal, "BackupsKept", "Teardown",
				"destination %s is read-only: its backups of cluster %s stay", d.Name(), cl.Name)
			continue
		}
		t := retention.Teardown{Store: d, Destination: d.Name(), Pins: c.pins}
		report, err := t.Run(ctx, cl.Name)
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
