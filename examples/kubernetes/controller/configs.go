package controller

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/schedule"
)

// configs reconciles the scheduler's jobs to the EtcdBackupConfigs: one
// job per config, its ID "namespace/name".
type configs struct {
	client    client.Client
	events    recorder
	registry  *destination.Registry
	scheduler *schedule.Scheduler
	clusters  *clusters
	// metrics gets each job's cluster and destinations when it is set,
	// so that their failure counters exist at zero before the first run.
	metrics *backup.Metrics
	// ran carries the end of each run into the controller, which then
	// writes the config's status, and the configs whose destination the
	// registry changed.
	ran chan event.GenericEvent
	// loaded opens once the registry holds the BackupDestinations: before,
	// a config would be refused for a destination not loaded yet.
	loaded *gate

	// follows holds what each job's follower last reported.
	follows follows
	// replicas holds what each replication job's copies last reported.
	replicas replicas

	// drills runs the configs' restore drills.
	drills *drills

	mu         sync.Mutex
	applied    map[string]destination.BackupConfig // by job ID: what each job was set from
	drillEvery map[string]time.Duration            // by job ID: the drill interval of configs with drills
}

func (c *configs) setup(mgr ctrl.Manager) error {
	c.applied = map[string]destination.BackupConfig{}
	c.drillEvery = map[string]time.Duration{}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.EtcdBackupConfig{}).
		Watches(&v1alpha1.BackupDestination{}, handler.EnqueueRequestsFromMapFunc(c.byField(indexDestination))).
		Watches(&v1alpha1.EtcdCluster{}, handler.EnqueueRequestsFromMapFunc(c.byField(indexCluster))).
		WatchesRawSource(source.Channel(c.ran, &handler.EnqueueRequestForObject{})).
		Complete(c)
}

// byField enqueues the configs that name an object in a field.
func (c *configs) byField(field string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var list v1alpha1.EtcdBackupConfigList
		if err := c.client.List(ctx, &list, client.MatchingFields{field: o.GetName()}); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for _, bc := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&bc)})
		}
		return reqs
	}
}

// revalidate enqueues the configs that name one of the destinations.
func (c *configs) revalidate(ctx context.Context, destinations []string) {
	for _, name := range destinations {
		var list v1alpha1.EtcdBackupConfigList
		if err := c.client.List(ctx, &list, client.MatchingFields{indexDestination: name}); err != nil {
			continue
		}
		for i := range list.Items {
			select {
			case c.ran <- event.GenericEvent{Object: &list.Items[i]}:
			case <-ctx.Done():
				return
			}
		}
	}
}

func jobID(key types.NamespacedName) string { return key.Namespace + "/" + key.Name }

func (c *configs) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var bc v1alpha1.EtcdBackupConfig
	if err := c.client.Get(ctx, req.NamespacedName, &bc); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, c.remove(ctx, jobID(req.NamespacedName))
		}
		return reconcile.Result{}, err
	}
	if !bc.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, c.remove(ctx, jobID(req.NamespacedName))
	}
	if !c.loaded.isOpen() {
		return reconcile.Result{RequeueAfter: waitAgain}, nil
	}
	before := bc.Status.DeepCopy()
	err := c.set(ctx, &bc)
	accepted := metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: "Scheduled",
		Message: "the backup job is scheduled", ObservedGeneration: bc.Generation}
	if err != nil {
		accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, configRefusal(err), err.Error()
		// A refused config runs no more: its old job would back up what
		// the object no longer says.
		if rerr := c.remove(ctx, jobID(req.NamespacedName)); rerr != nil {
			return reconcile.Result{}, rerr
		}
	}
	if meta.SetStatusCondition(&bc.Status.Conditions, accepted) && err != nil {
		c.events.Eventf(&bc, nil, corev1.EventTypeWarning, "Refused", "Schedule", "%s", err.Error())
	}
	bc.Status.ObservedGeneration = bc.Generation
	bc.Status.Continuous, bc.Status.Replication = nil, nil
	if js, ok := c.scheduler.Get(jobID(req.NamespacedName) + replicaSuffix); ok && err == nil {
		bc.Status.Replication = c.replicas.status(js.Job.ID, js.Job.Destinations, js.Status)
	} else if msg := c.replicas.refusal(jobID(req.NamespacedName) + replicaSuffix); msg != "" && err == nil {
		bc.Status.Replication = &v1alpha1.ReplicationStatus{Message: msg}
	}
	if js, ok := c.scheduler.Get(jobID(req.NamespacedName)); ok && err == nil {
		jobStatus(&bc.Status, js.Status, bc.Generation)
		if js.Job.Continuous != nil {
			bc.Status.Continuous = continuousStatus(c.follows.status(js.Job.ID), js.Status)
		}
	}
	if bc.Spec.Drill != nil && err == nil && c.drills != nil {
		drillStatus(&bc.Status, c.drills.status(jobID(req.NamespacedName)), bc.Generation)
	} else {
		drillStatus(&bc.Status, nil, bc.Generation)
	}
	if !equalStatus(before, &bc.Status) {
		if err := c.client.Status().Update(ctx, &bc); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	return reconcile.Result{}, nil
}

// set validates a config against the registry and its cluster and sets
// its job.
func (c *configs) set(ctx context.Context, bc *v1alpha1.EtcdBackupConfig) error {
	id := jobID(client.ObjectKeyFromObject(bc))
	var cl v1alpha1.EtcdCluster
	if err := c.client.Get(ctx, types.NamespacedName{Name: bc.Spec.Cluster}, &cl); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: cluster %s not found", errNoCluster, bc.Spec.Cluster)
		}
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var existing *destination.BackupConfig
	if prev, ok := c.applied[id]; ok {
		existing = &prev
	}
	valid, err := c.registry.ValidateBackupConfig(destination.BackupConfig{
		Name: backupName(bc.Namespace, bc.Name, ""), Cluster: bc.Spec.Cluster, Destination: bc.Spec.Destination,
		Schedule: bc.Spec.Schedule, Keep: int(bc.Spec.Keep)}, existing)
	if err != nil {
		return err
	}
	job, err := configJob(id, &bc.Spec, valid)
	if err != nil {
		return err
	}
	replica, replicating := replicaJob(job, &bc.Spec)
	// A replicateTo destination that is unknown or read-only stops the
	// copies, not the config's backups: the status says why.
	refused := validReplicaTargets(c.registry, valid, bc.Spec.ReplicateTo)
	if refused != nil {
		replicating = false
	}
	// A cluster being torn down gets no new job: its backups are being
	// deleted. The check and Set hold the clusters' lock, which the
	// teardown takes before it removes the cluster's jobs.
	return c.clusters.unlessTornDown(&cl, func() error {
		if err := c.scheduler.Set(job); err != nil {
			return err
		}
		if err := c.setReplica(ctx, id, replica, replicating); err != nil {
			return err
		}
		c.replicas.refuse(id+replicaSuffix, refused)
		if c.metrics != nil {
			c.metrics.Known(job.Cluster, job.Destinations...)
		}
		c.applied[id] = valid
		if dr := bc.Spec.Drill; dr != nil {
			c.drillEvery[id] = dr.Interval.Duration
		} else {
			delete(c.drillEvery, id)
		}
		return nil
	})
}

func (c *configs) remove(ctx context.Context, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.applied[id]; !ok {
		return nil
	}
	// Remove waits until a run in flight has been cancelled.
	if err := c.scheduler.Remove(ctx, id); err != nil {
		return err
	}
	if err := c.setReplica(ctx, id, schedule.Job{}, false); err != nil {
		return err
	}
	delete(c.applied, id)
	delete(c.drillEvery, id)
	c.follows.forget(id)
	if c.drills != nil {
		c.drills.forget(id)
	}
	return nil
}

// setReplica sets the replication job of config job id, or removes it
// when the config has none.
func (c *configs) setReplica(ctx context.Context, id string, job schedule.Job, replicating bool) error {
	if replicating {
		return c.scheduler.Set(job)
	}
	// Removed whether or not the scheduler holds it: a removal that gave
	// up waiting left the job out of the scheduler, and Remove waits
	// again for what it cancelled.
	if err := c.scheduler.Remove(ctx, id+replicaSuffix); err != nil {
		return err
	}
	c.replicas.forget(id + replicaSuffix)
	return nil
}

// jobStatus copies what the scheduler knows of a job into a config's
// status.
func jobStatus(st *v1alpha1.EtcdBackupConfigStatus, s schedule.Status, gen int64) {
	st.LastBackup = optTime(s.LastRun)
	st.LastSuccess = optTime(s.LastSuccess)
	st.NextBackup = optTime(s.NextRun)
	switch {
	case s.LastError != nil:
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionBackupSucceeded, Status: metav1.ConditionFalse,
			Reason: "BackupFailed", Message: s.LastError.Error(), ObservedGeneration: gen})
	case !s.LastSuccess.IsZero():
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionBackupSucceeded, Status: metav1.ConditionTrue,
			Reason: "BackupCompleted", Message: fmt.Sprintf("%d backups succeeded since the job was set", s.Successes), ObservedGeneration: gen})
	}
}

// continuousStatus is a config's continuous status: what its follower
// last reported (nil before its first event) with the scheduler's view of
// the follower.
func continuousStatus(st *v1alpha1.ContinuousStatus, s schedule.Status) *v1alpha1.ContinuousStatus {
	if st == nil {
		st = &v1alpha1.ContinuousStatus{}
	}
	st.Following, st.Restarts, st.Message = s.Following, s.FollowRestarts, ""
	if s.FollowError != nil {
		st.Message = s.FollowError.Error()
	}
	return st
}

var errNoCluster = errors.New("no such cluster")

// configRefusal names the sentinel a backup config's refusal wraps, as a
// condition reason.
func configRefusal(err error) string {
	return reasonOf(err, []sentinelReason{
		{errNoCluster, "ClusterNotFound"},
		{errTornDown, "ClusterDeleted"},
		{destination.ErrNotFound, "DestinationNotFound"},
		{destination.ErrReadOnly, "DestinationReadOnly"},
		{destination.ErrDestinationChanged, "DestinationChanged"},
		{schedule.ErrInvalidJob, "InvalidJob"},
		{destination.ErrInvalidBackupConfig, "InvalidConfig"},
	})
}

func optTime(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	mt := metav1.NewTime(t)
	return &mt
}

// equalStatus compares statuses as the API server stores them: times to
// the second.
func equalStatus(a, b any) bool { return equality.Semantic.DeepEqual(a, b) }

// runner runs each job through the library's PipelineRunner, with the
// job's config as the object of its events, and tells the configs
// controller when a run ended.
type runner struct {
	base    schedule.PipelineRunner
	metrics *backup.Metrics
	configs *configs
	events  recorder
}

func (r *runner) Backup(ctx context.Context, job schedule.Job, tick time.Time) error {
	obj := realObject(ctx, r.configs.client, configObject(configID(job.ID)))
	p := r.base
	p.Observer = backup.Observers{r.metrics, &backupEvents{events: r.events, obj: obj}}
	if job.Replicate != nil {
		p.ReplicationObserver = r.configs.replicas.observer(job.ID)
	}
	err := p.Backup(ctx, job, tick)
	select {
	case r.configs.ran <- event.GenericEvent{Object: obj}:
	default: // the controller is behind; the config's next event catches up
	}
	return err
}

func (r *runner) Prune(ctx context.Context, job schedule.Job) error {
	return r.base.Prune(ctx, job)
}

// configObject is the config of a job ID, for events and requests.
func configObject(id string) *v1alpha1.EtcdBackupConfig {
	ns, name, _ := cutLast(id)
	return &v1alpha1.EtcdBackupConfig{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "EtcdBackupConfig"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
	}
}

func cutLast(id string) (string, string, bool) {
	for i := len(id) - 1; i >= 0; i-- {
		if id[i] == '/' {
			return id[:i], id[i+1:], true
		}
	}
	return "", id, false
}

// backupName is the library's backup name of a namespaced object: its
// namespace and name, cut to fit a DNS label, then a hash of namespace,
// name and uid (when set) that keeps apart what the cut or the '-' would
// merge ("a-b"/"c" and "a"/"b-c"). The name scopes retention and is part
// of every backup ID: two namespaces never share one.
func backupName(namespace, name, uid string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name + "/" + uid))
	hash := strings.ToLower(base32.StdEncoding.EncodeToString(sum[:]))[:13] // 65 bits
	readable := []byte(namespace + "-" + name)
	for i, b := range readable {
		if !('a' <= b && b <= 'z' || '0' <= b && b <= '9') {
			readable[i] = '-'
		}
	}
	readable = readable[:min(len(readable), backup.MaxNameLen-len(hash)-1)]
	return string(readable) + "-" + hash
}
