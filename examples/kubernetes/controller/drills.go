package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/restore"
)

// drillTick is how often the drills runnable looks for a config whose
// drill is due.
const drillTick = 5 * time.Second

// drills runs the restore drills of the configs that ask for them, on the
// leader: each config's newest backup on its destination, pinned against
// retention while it is drilled, at the config's interval. A config with
// no backup yet gets no verdict until its first lands.
type drills struct {
	configs  *configs
	restorer *restore.Restorer
	events   recorder

	mu   sync.Mutex
	last map[string]*v1alpha1.DrillStatus // by job ID
}

// Start runs the drills until ctx ends.
func (d *drills) Start(ctx context.Context) error {
	t := time.NewTicker(drillTick)
	defer t.Stop()
	for {
		d.runDue(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// due is a config whose drill is due, as the configs controller set it.
type due struct {
	id, name, cluster, destination string
	every                          time.Duration
}

// runDue drills every config whose last drill is older than its interval.
func (d *drills) runDue(ctx context.Context) {
	d.configs.mu.Lock()
	var todo []due
	for id, every := range d.configs.drillEvery {
		valid := d.configs.applied[id]
		todo = append(todo, due{id: id, name: valid.Name, cluster: valid.Cluster, destination: valid.Destination, every: every})
	}
	d.configs.mu.Unlock()
	for _, c := range todo {
		if last := d.status(c.id); last != nil && time.Since(last.Time.Time) < c.every {
			continue
		}
		dest, err := d.configs.registry.Get(c.destination)
		if err != nil {
			continue // removed meanwhile
		}
		sources := []restore.Source{{Name: dest.Name(), Catalog: dest}}
		verdict := func(ctx context.Context, res *restore.DrillResult) {
			if ctx.Err() != nil || errors.Is(res.Err, restore.ErrNoBackup) && d.status(c.id) == nil {
				return // cut short, or nothing backed up yet: no verdict
			}
			d.record(c.id, res)
		}
		id, err := ownNewest(ctx, sources, c.cluster, c.name)
		if err != nil {
			verdict(ctx, &restore.DrillResult{Source: dest.Name(), Cluster: c.cluster, Started: time.Now(), Err: err})
			continue
		}
		_ = d.restorer.DrillJob(sources, restore.Query{Cluster: c.cluster, ID: id}, verdict)(ctx)
		if ctx.Err() != nil {
			return
		}
	}
}

// ownNewest returns the ID of the newest full snapshot backup of cluster
// named name (a config's own backups: not those of other configs or
// one-shot EtcdBackups of the same cluster, nor logical backups).
func ownNewest(ctx context.Context, sources []restore.Source, cluster, name string) (string, error) {
	all, err := restore.List(ctx, sources, cluster)
	if err != nil {
		return "", err
	}
	for _, b := range slices.Backward(all) { // oldest first
		if m := b.Manifest; b.Kind == backup.KindBackup && m != nil && m.Name == name && !m.IsDelta() && !m.IsLogical() {
			return b.ID, nil
		}
	}
	return "", fmt.Errorf("no backup %q of cluster %q: %w", name, cluster, restore.ErrNoBackup)
}

func (d *drills) status(id string) *v1alpha1.DrillStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	if st := d.last[id]; st != nil {
		return st.DeepCopy()
	}
	return nil
}

// record keeps a drill's result, sends an Event and has the config write
// its status.
func (d *drills) record(id string, res *restore.DrillResult) {
	st := &v1alpha1.DrillStatus{Time: metav1.NewTime(res.Started), BackupID: res.ID, Passed: res.Passed()}
	if res.Err != nil {
		st.Message = res.Err.Error()
	}
	d.mu.Lock()
	if d.last == nil {
		d.last = map[string]*v1alpha1.DrillStatus{}
	}
	d.last[id] = st
	d.mu.Unlock()
	obj := configObject(id)
	if st.Passed {
		d.events.Eventf(obj, nil, corev1.EventTypeNormal, "DrillPassed", "Drill", "backup %s restored and checked in %s", res.ID, res.Duration.Round(time.Millisecond))
	} else {
		d.events.Eventf(obj, nil, corev1.EventTypeWarning, "DrillFailed", "Drill", "drill of backup %s failed: %s", res.ID, st.Message)
	}
	select {
	case d.configs.ran <- event.GenericEvent{Object: obj}:
	default: // the controller is behind; the config's next event catches up
	}
}

func (d *drills) forget(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.last, id)
}

// drillStatus copies a config's last drill into its status.
func drillStatus(st *v1alpha1.EtcdBackupConfigStatus, last *v1alpha1.DrillStatus, gen int64) {
	st.LastDrill = last
	if last == nil {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionDrillSucceeded)
		return
	}
	c := metav1.Condition{Type: v1alpha1.ConditionDrillSucceeded, Status: metav1.ConditionTrue, Reason: "DrillPassed",
		Message: "backup " + last.BackupID + " restored and checked", ObservedGeneration: gen}
	if !last.Passed {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, "DrillFailed", last.Message
	}
	meta.SetStatusCondition(&st.Conditions, c)
}
