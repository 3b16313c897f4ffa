package controller

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
	"github.com/etcdbackup/etcdbackup/replicate"
	"github.com/etcdbackup/etcdbackup/schedule"
)

// replicaSuffix ends the ID of a config's replication job: "#" is in no
// namespace or object name, so no config's own job ID ends so.
const replicaSuffix = "#replicate"

// continuousReplicaSchedule is the schedule of a continuous config's
// copies: its segments commit every second, its schedule only starts its
// chains.
const continuousReplicaSchedule = "@every 1m"

// replicaJob maps a config's replicateTo onto the library's replication
// job: the config's backups (schedule.Replicate.Name: no other config's,
// whose copies it neither makes nor prunes) from the config's destination
// to each of replicateTo, on the
// config's schedule (every minute when continuous), with the config's
// retention of the copies and its continuous window for their segments.
func replicaJob(backupJob schedule.Job, spec *v1alpha1.EtcdBackupConfigSpec) (schedule.Job, bool) {
	if len(spec.ReplicateTo) == 0 {
		return schedule.Job{}, false
	}
	job := schedule.Job{
		ID: backupJob.ID + replicaSuffix, Schedule: backupJob.Schedule, TimeZone: backupJob.TimeZone,
		Cluster: backupJob.Cluster, Name: backupJob.Name, Destinations: spec.ReplicateTo,
		Retention: backupJob.Retention,
		// The config's own backups alone: another config's copies on a
		// shared target are not this config's to copy or prune.
		Replicate: &schedule.Replicate{From: backupJob.Destinations[0], Name: backupJob.Name},
	}
	if c := backupJob.Continuous; c != nil {
		job.Schedule = continuousReplicaSchedule
		job.Replicate.PointInTime = c.Window
	}
	return job, true
}

// configID returns the ID of the config's own job of a job ID (a
// replication job's ID ends with replicaSuffix).
func configID(id string) string { return strings.TrimSuffix(id, replicaSuffix) }

// validReplicaTargets checks that every destination of replicateTo is
// known and writable.
func validReplicaTargets(registry *destination.Registry, valid destination.BackupConfig, targets []string) error {
	for _, name := range targets {
		cfg := valid
		cfg.Destination = name
		if _, err := registry.ValidateBackupConfig(cfg, nil); err != nil {
			return err
		}
	}
	return nil
}

// replicas keeps what each replication job's last copy to each target
// reported, by job ID, for the configs' status.
type replicas struct {
	mu sync.Mutex
	by map[string]map[string]*v1alpha1.ReplicationTarget // job ID -> target -> state
	// refused says why a config's replicateTo was refused, by job ID.
	refused map[string]string
	// behindSince is the creation time of the oldest backup a copy in
	// progress found missing, by job ID and target.
	behindSince map[string]map[string]time.Time
}

// observer returns the Observer of job id's copies.
func (r *replicas) observer(id string) replicate.Observer {
	return replicate.ObserverFunc(func(e replicate.Event) { r.observe(id, e) })
}

func (r *replicas) observe(id string, e replicate.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by == nil {
		r.by, r.behindSince = map[string]map[string]*v1alpha1.ReplicationTarget{}, map[string]map[string]time.Time{}
	}
	if r.by[id] == nil {
		r.by[id], r.behindSince[id] = map[string]*v1alpha1.ReplicationTarget{}, map[string]time.Time{}
	}
	switch e.Kind {
	case replicate.Planned:
		// A copy to the target starts: its count starts again.
		r.by[id][e.Target] = &v1alpha1.ReplicationTarget{Destination: e.Target, LagSeconds: "0"}
		delete(r.behindSince[id], e.Target)
	case replicate.Done:
		st := r.by[id][e.Target]
		if st == nil || e.Item == nil {
			return
		}
		switch e.Item.Outcome {
		case replicate.Copied, replicate.Resumed:
			st.Copied++
		case replicate.Skipped:
		case replicate.NotCopied:
			if e.Item.InvalidSource() {
				st.InvalidSourceManifests++
				break
			}
			fallthrough
		default:
			st.BackupsBehind++
			if since, ok := r.behindSince[id][e.Target]; !ok || e.Item.Created.Before(since) {
				r.behindSince[id][e.Target] = e.Item.Created
			}
		}
		if since, ok := r.behindSince[id][e.Target]; ok {
			st.LagSeconds = strconv.FormatFloat(max(e.Time.Sub(since), 0).Seconds(), 'f', 3, 64)
		}
		st.LastCopy = optTime(e.Time)
	}
}

// status returns the replication status of job id (the replication
// job's) over targets, in their order, with the scheduler's view of its
// runs.
func (r *replicas) status(id string, targets []string, s schedule.Status) *v1alpha1.ReplicationStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &v1alpha1.ReplicationStatus{LastRun: optTime(s.LastRun), LastSuccess: optTime(s.LastSuccess)}
	if s.LastError != nil {
		st.Message = s.LastError.Error()
	}
	for _, name := range targets {
		if t := r.by[id][name]; t != nil {
			st.Targets = append(st.Targets, *t.DeepCopy())
		}
	}
	return st
}

func (r *replicas) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.by, id)
	delete(r.behindSince, id)
	delete(r.refused, id)
}

// refuse records why job id's targets were refused (nil: they were not).
func (r *replicas) refuse(id string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		delete(r.refused, id)
		return
	}
	if r.refused == nil {
		r.refused = map[string]string{}
	}
	r.refused[id] = "replicateTo refused, no copies: " + err.Error()
}

// refusal returns why job id's targets were refused, "" when they were not.
func (r *replicas) refusal(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused[id]
}
