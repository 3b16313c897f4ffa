package controller

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/retention"
	"github.com/etcdbackup/etcdbackup/schedule"
)

// configJob maps a config, validated against the registry as valid, onto
// the scheduler's job: kind and prefixes, time zone, retention and
// continuous backup, as the controller-manager example maps its file. The
// scheduler validates the job again when it is set (schedule.ErrInvalidJob).
func configJob(id string, spec *v1alpha1.EtcdBackupConfigSpec, valid destination.BackupConfig) (schedule.Job, error) {
	job := schedule.Job{
		ID: id, Schedule: valid.Schedule, TimeZone: spec.TimeZone, Cluster: valid.Cluster, Name: valid.Name,
		Destinations: []string{valid.Destination},
		Compression:  backup.Compression(spec.Compression),
		Encryption:   backup.Encryption{Recipients: spec.Recipients},
		Kind:         backupKind(spec.Type),
		Prefixes:     spec.Prefixes,
	}
	if valid.Keep > 0 {
		job.Retention = retention.KeepLast(valid.Keep)
	}
	if r := spec.Retention; r != nil {
		loc, err := time.LoadLocation(spec.TimeZone)
		if err != nil {
			return schedule.Job{}, fmt.Errorf("%w: time zone %q: %w", destination.ErrInvalidBackupConfig, spec.TimeZone, err)
		}
		job.Retention = retention.Policy{
			KeepLast: int(r.KeepLast), KeepWithin: duration(r.KeepWithin, 0),
			Hours: int(r.Hours), Days: int(r.Days), Weeks: int(r.Weeks), Months: int(r.Months),
			Location: loc, MaxAge: duration(r.MaxAge, 0),
		}
	}
	if c := spec.Continuous; c != nil {
		job.Continuous = &schedule.Continuous{Window: c.Window.Duration, FlushInterval: duration(c.FlushInterval, 0)}
	}
	return job, nil
}

// backupKind is the library's kind of a backup type; snapshot and the
// empty type (objects written before the field) are etcd snapshots.
func backupKind(t v1alpha1.BackupType) backup.Kind {
	if t == v1alpha1.TypeKeysJSON {
		return backup.KindKeysJSON
	}
	return backup.KindBackup
}

// follows keeps what each job's follower last reported, by job ID, for
// the configs' status.
type follows struct {
	mu sync.Mutex
	by map[string]*v1alpha1.ContinuousStatus
	// nudged is when each job's config was last asked to write its status
	// after a stored segment: at most once per followStatusEvery.
	nudged map[string]time.Time
}

// followStatusEvery bounds how often stored segments make a config write
// its status: a follower stores a segment every second.
const followStatusEvery = 10 * time.Second

// status returns a copy of the job's continuous status, or nil.
func (f *follows) status(id string) *v1alpha1.ContinuousStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st := f.by[id]; st != nil {
		return st.DeepCopy()
	}
	return nil
}

func (f *follows) forget(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.by, id)
	delete(f.nudged, id)
}

// observe records a follower's event of job id, and reports whether the
// config's status should be written now.
func (f *follows) observe(id string, e backup.FollowEvent) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.by == nil {
		f.by, f.nudged = map[string]*v1alpha1.ContinuousStatus{}, map[string]time.Time{}
	}
	st := f.by[id]
	if st == nil {
		st = &v1alpha1.ContinuousStatus{}
		f.by[id] = st
	}
	if e.Chain != "" {
		st.ChainStart = e.Chain
	}
	if e.HeadRevision > 0 || e.Committed > 0 {
		st.HeadRevision, st.CommittedRevision = e.HeadRevision, e.Committed
		st.LagRevisions = max(e.HeadRevision-e.Committed, 0)
	}
	switch e.Kind {
	case backup.SegmentCommitted:
		st.LastSegment = optTime(e.Time)
		st.LagSeconds = strconv.FormatFloat(e.Lag.Seconds(), 'f', 3, 64)
		if e.Time.Sub(f.nudged[id]) < followStatusEvery {
			return false
		}
		f.nudged[id] = e.Time
		return true
	case backup.ChainGap:
		st.LastGap, st.LastGapRevision = optTime(e.Time), e.Revision
		return true
	case backup.ChainStarted, backup.ChainResumed, backup.ChainRewound:
		return true
	}
	return false
}

// Follow runs the job's continuous backup through the library's
// PipelineRunner, recording its follower's state for the config's status
// and its chain events as Events of the config.
func (r *runner) Follow(ctx context.Context, job schedule.Job, started func()) error {
	obj := realObject(ctx, r.configs.client, configObject(job.ID))
	p := r.base
	p.FollowObserver = backup.FollowObservers{r.base.FollowObserver, backup.FollowObserverFunc(func(e backup.FollowEvent) {
		followEvent(r.events, obj, e)
		if r.configs.follows.observe(job.ID, e) {
			select {
			case r.configs.ran <- event.GenericEvent{Object: obj}:
			default: // the controller is behind; the config's next event catches up
			}
		}
	})}
	return p.Follow(ctx, job, started)
}

var _ schedule.ContinuousRunner = (*runner)(nil)

// followEvent records a follower's chain events as Events of the config.
func followEvent(events recorder, obj *v1alpha1.EtcdBackupConfig, e backup.FollowEvent) {
	switch e.Kind {
	case backup.ChainStarted:
		events.Eventf(obj, nil, corev1.EventTypeNormal, "ChainStarted", "Follow", "continuous backup of cluster %s: a chain starts after full backup %s", e.Cluster, e.Chain)
	case backup.ChainGap:
		events.Eventf(obj, nil, corev1.EventTypeWarning, "ChainGap", "Follow", "continuous backup of cluster %s: etcd compacted revision %d before it was read; a new chain starts", e.Cluster, e.Revision)
	case backup.ChainRewound:
		events.Eventf(obj, nil, corev1.EventTypeWarning, "ChainRewound", "Follow", "continuous backup of cluster %s: %v; a new chain starts", e.Cluster, e.Err)
	}
}
