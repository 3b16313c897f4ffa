package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"filippo.io/age"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/restore"
	"github.com/etcdbackup/etcdbackup/retention"
)

// restores runs each EtcdRestore once through a restore.Restorer, into a
// data directory under dir.
type restores struct {
	client     client.Client
	events     recorder
	registry   *destination.Registry
	pins       *retention.PinSet
	dir        string
	identities []age.Identity
	now        func() time.Time
	log        *slog.Logger
	loaded     *gate
	// clusters gives imports a client of the cluster's etcd.
	clusters *clusters

	// held releases the pins of each restore beside the members, while
	// the members read its backups: by UID, so that a restore deleted and
	// created again under its name pins its own plan.
	mu   sync.Mutex
	held map[types.UID]heldPlan
}

// heldPlan is what hold pinned for one restore.
type heldPlan struct {
	name  types.NamespacedName
	unpin func()
}

func (r *restores) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&v1alpha1.EtcdRestore{}).Complete(r)
}

// Reconcile runs a restore that has not ended. A restore writes its data
// directory aside and renames it into place at the end, so one
// interrupted by a restart runs again from the start; one that had
// finished finds its directory there and fails with ErrTargetExists. A
// restore whose destination is not known yet (created in the same apply,
// and not seen yet, or destinations not loaded since the controller
// started, or none at all) stays Pending until it is. A restore beside
// the members whose plan is published needs no destination: its backups
// are pinned again at once by a controller that just became the leader.
func (r *restores) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var rs v1alpha1.EtcdRestore
	if err := r.client.Get(ctx, req.NamespacedName, &rs); err != nil {
		r.releaseOthers(req.NamespacedName, "")
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	r.releaseOthers(req.NamespacedName, rs.UID) // a deleted restore of the same name
	if !rs.DeletionTimestamp.IsZero() || rs.Status.Phase == v1alpha1.PhaseCompleted || rs.Status.Phase == v1alpha1.PhaseFailed {
		r.release(rs.UID)
		return reconcile.Result{}, nil
	}
	st := phaseStatus{&rs.Status.Phase, &rs.Status.Message, &rs.Status.Conditions, &rs.Status.ObservedGeneration}
	switch {
	case len(rs.Spec.Members) > 0 && rs.Status.Plan != nil:
		return r.reconcilePlan(ctx, &rs, st)
	case !r.loaded.isOpen():
		return wait(ctx, r.client, &rs, st, errNotLoaded)
	case rs.Spec.Destination != "":
		if _, err := r.registry.Get(rs.Spec.Destination); errors.Is(err, destination.ErrNotFound) {
			return wait(ctx, r.client, &rs, st, err) // created in the same apply
		}
	case len(r.registry.List()) == 0:
		return wait(ctx, r.client, &rs, st, errNoDestinations)
	}
	if len(rs.Spec.Members) > 0 {
		return r.reconcilePlan(ctx, &rs, st)
	}
	// Update, not Patch: a cache that has not seen the end of the last
	// run yet holds an old resourceVersion, and the conflict stops a
	// second run.
	st.set(rs.Generation, v1alpha1.PhaseRunning, "")
	rs.Status.StartTime = now(r.now)
	if err := r.client.Status().Update(ctx, &rs); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	err := r.run(ctx, &rs)
	rs.Status.CompletionTime = now(r.now)
	if err != nil {
		if ctx.Err() != nil {
			return reconcile.Result{}, ctx.Err()
		}
		st.set(rs.Generation, v1alpha1.PhaseFailed, err.Error())
	} else {
		st.set(rs.Generation, v1alpha1.PhaseCompleted, "")
	}
	return reconcile.Result{}, client.IgnoreNotFound(r.client.Status().Update(ctx, &rs))
}

// errNoDestinations keeps a restore from every destination Pending while
// there is none.
var errNoDestinations = errors.New("no destination to restore from")

func (r *restores) run(ctx context.Context, rs *v1alpha1.EtcdRestore) error {
	if rs.Spec.Import != nil {
		return r.runImport(ctx, rs)
	}
	if r.dir == "" {
		return fmt.Errorf("restores are disabled: the controller has no restore directory")
	}
	m := rs.Spec.Member
	if m == nil {
		return errors.New("no member to restore")
	}
	if !filepath.IsLocal(m.DataDir) {
		return fmt.Errorf("member data directory %q is not a relative path inside the restore directory", m.DataDir)
	}
	sources, err := r.sources(rs)
	if err != nil {
		return err
	}
	restorer := &restore.Restorer{Identities: r.identities, Observer: &restoreEvents{events: r.events, obj: rs},
		Logger: r.log, Now: r.now, Pins: r.pins, Job: rs.Namespace + "/" + rs.Name}
	member := restore.Member{
		Name: m.Name, DataDir: filepath.Join(r.dir, m.DataDir), PeerURLs: m.PeerURLs,
		InitialCluster: m.InitialCluster, ClusterToken: m.ClusterToken, RevisionBump: uint64(max(m.RevisionBump, 0)),
	}
	if point, ok := restorePoint(&rs.Spec); ok {
		return r.runPoint(ctx, rs, restorer, sources, point, member)
	}
	q := restore.Query{Cluster: rs.Spec.Cluster, ID: rs.Spec.BackupID}
	if rs.Spec.Before != nil {
		q.Before = rs.Spec.Before.Time
	}
	b, err := restore.Find(ctx, sources, q)
	if err != nil {
		return err
	}
	rs.Status.BackupID, rs.Status.Destination = b.ID, b.Source
	rm, err := restorer.Restore(ctx, b, member)
	if err != nil {
		return err
	}
	rs.Status.MemberID = strconv.FormatUint(rm.MemberID, 16)
	rs.Status.ClusterID = strconv.FormatUint(rm.ClusterID, 16)
	if m := b.Manifest; m != nil && m.Etcd.Revision.Low == m.Etcd.Revision.High {
		rs.Status.Revision = m.Etcd.Revision.High // exact; bounds say nothing
	}
	return nil
}

// sources are the destinations a restore reads: the one it names, or
// every one.
func (r *restores) sources(rs *v1alpha1.EtcdRestore) ([]restore.Source, error) {
	var sources []restore.Source
	if rs.Spec.Destination != "" {
		d, err := r.registry.Get(rs.Spec.Destination)
		if err != nil {
			return nil, err
		}
		return append(sources, restore.Source{Name: d.Name(), Catalog: d}), nil
	}
	for _, d := range r.registry.List() {
		sources = append(sources, restore.Source{Name: d.Name(), Catalog: d})
	}
	return sources, nil
}

// restorePoint returns the point of the continuous backup a restore asks
// for, and false when it asks for a full backup.
func restorePoint(s *v1alpha1.EtcdRestoreSpec) (restore.Point, bool) {
	p := restore.Point{Cluster: s.Cluster, Revision: s.Revision, NearestEarlier: s.NearestEarlier}
	if s.Time != nil {
		p.Time = s.Time.Time
	}
	return p, p.Revision > 0 || !p.Time.IsZero()
}

// runPoint restores a member to a point: the newest full backup at or
// before it, then the segments up to it. A point in a gap of the
// continuous backup fails, unless the restore asks for the nearest
// earlier point: the status then says what was skipped.
func (r *restores) runPoint(ctx context.Context, rs *v1alpha1.EtcdRestore, restorer *restore.Restorer,
	sources []restore.Source, p restore.Point, m restore.Member) error {
	plan, err := restore.FindPoint(ctx, sources, p)
	if err != nil {
		return err
	}
	rs.Status.BackupID, rs.Status.Destination = plan.Full.ID, plan.Full.Source
	if plan.Gap != nil {
		rs.Status.Gap = plan.Gap.Error()
	}
	res, err := restorer.RestorePoint(ctx, plan, m)
	if err != nil {
		return err
	}
	rs.Status.MemberID = strconv.FormatUint(res.MemberID, 16)
	rs.Status.ClusterID = strconv.FormatUint(res.ClusterID, 16)
	rs.Status.Revision, rs.Status.Segments = res.Revision, res.Segments
	return nil
}
