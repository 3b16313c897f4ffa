package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Encoding is how a backup's bytes are stored.
type Encoding struct {
	// Compression of the stored bytes: zstd (which is zstd:fastest),
	// zstd:fastest, zstd:default, zstd:better, gzip or none.
	// +kubebuilder:validation:Enum=zstd;zstd:fastest;zstd:default;zstd:better;gzip;none
	// +kubebuilder:default=zstd
	// +optional
	Compression string `json:"compression,omitempty"`
	// Recipients are age public keys the backups are encrypted to. Empty
	// means no encryption.
	// +optional
	// +listType=atomic
	Recipients []string `json:"recipients,omitempty"`
}

// EtcdBackupConfigSpec is a backup schedule of one cluster to one
// destination.
//
// +kubebuilder:validation:XValidation:rule="self.destination == oldSelf.destination",message="destination is immutable: the config's backups live there; delete the config and create a new one"
// +kubebuilder:validation:XValidation:rule="self.cluster == oldSelf.cluster",message="cluster is immutable"
// +kubebuilder:validation:XValidation:rule="(has(self.type) ? self.type : 'snapshot') == (has(oldSelf.type) ? oldSelf.type : 'snapshot')",message="type is immutable: the config's backups are of one kind; delete the config and create a new one"
// +kubebuilder:validation:XValidation:rule="!has(self.prefixes) || self.type == 'keys-json'",message="prefixes are for keys-json backups only"
// +kubebuilder:validation:XValidation:rule="!has(self.continuous) || self.type != 'keys-json'",message="continuous backup is for snapshot backups only: a keys-json backup cannot be continuous"
// +kubebuilder:validation:XValidation:rule="!has(self.continuous) || (has(self.schedule) && size(self.schedule) > 0)",message="continuous backup needs a schedule: the schedule's full backups start its chains"
// +kubebuilder:validation:XValidation:rule="!has(self.drill) || self.type != 'keys-json'",message="drills restore snapshots: a keys-json config has none"
// +kubebuilder:validation:XValidation:rule="!has(self.retention) || !has(self.keep) || self.keep == 0",message="give keep or retention, not both (keep N is retention.keepLast N)"
// +kubebuilder:validation:XValidation:rule="!has(self.replicateTo) || !(self.destination in self.replicateTo)",message="replicateTo names the config's own destination: copies go to other destinations"
// +kubebuilder:validation:XValidation:rule="!has(self.replicateTo) || (has(self.type) ? self.type : 'snapshot') == 'snapshot'",message="replication copies snapshot backups: a keys-json config cannot replicate"
// +kubebuilder:validation:XValidation:rule="!has(self.replicateTo) || (has(self.schedule) && size(self.schedule) > 0)",message="replication needs a schedule: the copies run on it"
type EtcdBackupConfigSpec struct {
	// Cluster names the EtcdCluster backed up.
	// +kubebuilder:validation:MinLength=1
	Cluster string `json:"cluster"`
	// Destination names the BackupDestination the backups go to.
	// +kubebuilder:validation:MinLength=1
	Destination string `json:"destination"`
	// Schedule is a cron expression (or @every <duration>). Empty means
	// one backup, at once.
	// +optional
	Schedule string `json:"schedule,omitempty"`
	// Keep is how many of the cluster's backups to keep on the
	// destination. Zero means the library's default (20).
	// +kubebuilder:validation:Minimum=0
	// +optional
	Keep int32 `json:"keep,omitempty"`
	// Retention says which backups to keep, as the library's
	// retention.Policy: the newest of each of the last hours, days, weeks
	// and months (GFS), the last N, those younger than keepWithin, and
	// nothing older than maxAge. Give keep or retention, not both. Nil
	// and keep zero mean the library's default (the last 20).
	// +optional
	Retention *Retention `json:"retention,omitempty"`
	// TimeZone is the IANA time zone the schedule and the calendar rules
	// of retention are read in, such as Europe/Berlin. Empty means UTC.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_+/-]*$`
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
	// Continuous also backs the cluster up continuously between the
	// schedule's full backups: every revision of its window stays
	// restorable (an EtcdRestore to a revision or a time). Snapshot
	// backups on a schedule only.
	// +optional
	Continuous *ContinuousBackup `json:"continuous,omitempty"`
	// Drill restores the config's newest backup on its destination into a
	// scratch directory at this interval, and checks its revision and keys
	// (the library's restore drill): condition DrillSucceeded and an Event
	// DrillPassed or DrillFailed say how it went. Snapshot backups only.
	// +optional
	Drill *Drill `json:"drill,omitempty"`
	// ReplicateTo names BackupDestinations the config's backups are copied
	// to, as stored: verified, resumable, chains whole, no decryption key
	// needed (the library's replication job, schedule.Job.Replicate). The
	// copies run on the config's schedule, or every minute for a
	// continuous config (its segments commit every second). Each
	// destination keeps the copies by the config's retention, and its
	// continuous window for the segments; only copies are pruned there,
	// never what another config wrote. An EtcdRestore naming one of them
	// restores from the copies alone. Snapshot configs on a schedule only;
	// not the config's own destination.
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=set
	// +optional
	ReplicateTo []string `json:"replicateTo,omitempty"`
	Logical     `json:",inline"`
	Encoding    `json:",inline"`
}

// Drill configures a config's restore drills.
type Drill struct {
	// Interval is how often a drill runs, the first as soon as the config
	// is accepted. At least 1m.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="drill.interval must be at least 1m"
	Interval metav1.Duration `json:"interval"`
}

// BackupType is what a backup holds.
// +kubebuilder:validation:Enum=snapshot;keys-json
type BackupType string

// The backup types.
const (
	// TypeSnapshot is an etcd snapshot: the whole keyspace, restored as a
	// member's data directory.
	TypeSnapshot BackupType = "snapshot"
	// TypeKeysJSON is a logical backup of the keys under chosen prefixes
	// at one revision, as JSON Lines: imported into a live etcd.
	TypeKeysJSON BackupType = "keys-json"
)

// Logical selects the kind of a backup and, for keys-json, its keys.
type Logical struct {
	// Type is snapshot (the default) or keys-json.
	// +kubebuilder:default=snapshot
	// +optional
	Type BackupType `json:"type,omitempty"`
	// Prefixes are the key prefixes a keys-json backup holds, such as
	// /registry/namespaces/. Empty means every key. keys-json only.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=1024
	// +listType=set
	// +optional
	Prefixes []string `json:"prefixes,omitempty"`
}

// ContinuousBackup configures a config's continuous backup: a follower
// watches etcd and stores every revision in delta segments that chain onto
// the schedule's full backups.
type ContinuousBackup struct {
	// Window is how far back every revision stays restorable: retention
	// keeps the full backups and segments it needs. At least 1m.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="continuous.window must be at least 1m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	Window metav1.Duration `json:"window"`
	// FlushInterval bounds how long a revision waits before its segment is
	// stored. Empty means the library's default (1s).
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="continuous.flushInterval must be positive"
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	FlushInterval *metav1.Duration `json:"flushInterval,omitempty"`
}

// Retention is the library's retention.Policy. A backup is kept when any
// keep rule selects it; maxAge then deletes what is older, whatever the
// keep rules say. The newest backup is always kept.
//
// +kubebuilder:validation:XValidation:rule="!has(self.maxAge) || !has(self.keepWithin) || duration(self.keepWithin) <= duration(self.maxAge)",message="retention.keepWithin is longer than retention.maxAge: maxAge would delete what keepWithin keeps"
type Retention struct {
	// KeepLast keeps the N newest backups.
	// +kubebuilder:validation:Minimum=0
	// +optional
	KeepLast int32 `json:"keepLast,omitempty"`
	// KeepWithin keeps every backup younger than it.
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="retention.keepWithin must be positive"
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	KeepWithin *metav1.Duration `json:"keepWithin,omitempty"`
	// Hours, Days, Weeks and Months keep the newest backup of each of the
	// last N calendar hours, days, ISO weeks and months: 24, 7, 4 and 12
	// is the classic grandfather-father-son scheme.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Hours int32 `json:"hours,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	Days int32 `json:"days,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	Weeks int32 `json:"weeks,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	Months int32 `json:"months,omitempty"`
	// MaxAge deletes backups older than it, even those a keep rule
	// selected.
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="retention.maxAge must be positive"
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`
}

// EtcdBackupConfigStatus is what the scheduler knows of a config.
type EtcdBackupConfigStatus struct {
	// Conditions are Accepted and BackupSucceeded.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastBackup is when the last backup started.
	// +optional
	LastBackup *metav1.Time `json:"lastBackup,omitempty"`
	// LastSuccess is when the last successful backup ended.
	// +optional
	LastSuccess *metav1.Time `json:"lastSuccess,omitempty"`
	// NextBackup is when the next backup is due.
	// +optional
	NextBackup *metav1.Time `json:"nextBackup,omitempty"`
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// LastDrill is the config's last restore drill. Nil before the first.
	// +optional
	LastDrill *DrillStatus `json:"lastDrill,omitempty"`
	// Continuous is what the config's continuous backup reports. Nil when
	// the config has none.
	// +optional
	Continuous *ContinuousStatus `json:"continuous,omitempty"`
	// Replication is the state of the copies to replicateTo. Nil when the
	// config has none.
	// +optional
	Replication *ReplicationStatus `json:"replication,omitempty"`
}

// ReplicationStatus is the state of a config's copies to other
// destinations.
type ReplicationStatus struct {
	// LastRun is when the last copy run started, and LastSuccess when the
	// last one that left every destination in step ended.
	// +optional
	LastRun *metav1.Time `json:"lastRun,omitempty"`
	// +optional
	LastSuccess *metav1.Time `json:"lastSuccess,omitempty"`
	// Message says why the last run failed; empty when it succeeded.
	// +optional
	Message string `json:"message,omitempty"`
	// Targets is the state of each destination after the last copy to it.
	// +listType=map
	// +listMapKey=destination
	// +optional
	Targets []ReplicationTarget `json:"targets,omitempty"`
}

// ReplicationTarget is the state of one destination of a config's copies
// after the last copy to it.
type ReplicationTarget struct {
	// Destination names the BackupDestination.
	Destination string `json:"destination"`
	// BackupsBehind counts the selected backups it did not hold after the
	// copy (failed, pending, or after a hole of the source's chain): zero
	// when in step.
	// +optional
	BackupsBehind int32 `json:"backupsBehind,omitempty"`
	// LagSeconds is the age of the oldest of them when the copy ended, in
	// seconds; "0" when in step.
	// +optional
	LagSeconds string `json:"lagSeconds,omitempty"`
	// InvalidSourceManifests counts the manifests on the source the copy
	// selected but this version cannot read (a newer version's, damaged,
	// or naming a data object that is gone): not copied, and not counted
	// in BackupsBehind. Upgrade, or repair or remove them on the source.
	// +optional
	InvalidSourceManifests int32 `json:"invalidSourceManifests,omitempty"`
	// Copied counts the backups the copy copied.
	// +optional
	Copied int32 `json:"copied,omitempty"`
	// LastCopy is when the copy ended.
	// +optional
	LastCopy *metav1.Time `json:"lastCopy,omitempty"`
}

// DrillStatus is the outcome of a restore drill.
type DrillStatus struct {
	// Time is when the drill started.
	Time metav1.Time `json:"time"`
	// BackupID is the backup drilled.
	// +optional
	BackupID string `json:"backupID,omitempty"`
	// Passed says that etcd restored a data directory from the backup and
	// that it holds the backup's revision and keys.
	Passed bool `json:"passed"`
	// Message says why the drill failed.
	// +optional
	Message string `json:"message,omitempty"`
}

// ContinuousStatus is the state of a config's continuous backup, as its
// follower last reported it.
type ContinuousStatus struct {
	// Following is true while the follower watches etcd.
	// +optional
	Following bool `json:"following,omitempty"`
	// ChainStart is the ID of the full backup the current chain of
	// segments starts from.
	// +optional
	ChainStart string `json:"chainStart,omitempty"`
	// CommittedRevision is the last revision stored on the destination,
	// HeadRevision etcd's revision as last seen, and LagRevisions their
	// difference.
	// +optional
	CommittedRevision int64 `json:"committedRevision,omitempty"`
	// +optional
	HeadRevision int64 `json:"headRevision,omitempty"`
	// +optional
	LagRevisions int64 `json:"lagRevisions,omitempty"`
	// LagSeconds is, for the last segment stored, the time from the
	// reception of its first revision to its commit, in seconds.
	// +optional
	LagSeconds string `json:"lagSeconds,omitempty"`
	// LastSegment is when the last segment was stored.
	// +optional
	LastSegment *metav1.Time `json:"lastSegment,omitempty"`
	// LastGap is when etcd last compacted revisions before the follower
	// read them, and LastGapRevision the first revision lost: a new chain
	// started, and the revisions between cannot be restored.
	// +optional
	LastGap *metav1.Time `json:"lastGap,omitempty"`
	// +optional
	LastGapRevision int64 `json:"lastGapRevision,omitempty"`
	// Restarts counts the times the follower ended and was started again;
	// Message says why it last ended.
	// +optional
	Restarts int64 `json:"restarts,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// EtcdBackupConfig backs up a cluster's etcd to a destination on a
// schedule, and keeps the newest backups. Its backup name, part of every
// backup's ID and the scope of its retention, is
// "<namespace>-<name>-<hash>", the hash of its namespace and name: configs
// of the same name in two namespaces never prune each other's backups.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Destination",type=string,JSONPath=`.spec.destination`
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Last Success",type=date,JSONPath=`.status.lastSuccess`
type EtcdBackupConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EtcdBackupConfigSpec   `json:"spec"`
	Status EtcdBackupConfigStatus `json:"status,omitempty"`
}

// EtcdBackupConfigList is a list of EtcdBackupConfigs.
//
// +kubebuilder:object:root=true
type EtcdBackupConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdBackupConfig `json:"items"`
}

// Phase is where a one-shot backup or a restore is.
// +kubebuilder:validation:Enum=Pending;Running;Completed;Failed
type Phase string

// The phases of EtcdBackup and EtcdRestore.
const (
	PhasePending   Phase = "Pending"
	PhaseRunning   Phase = "Running"
	PhaseCompleted Phase = "Completed"
	PhaseFailed    Phase = "Failed"
)

// EtcdBackupSpec is one backup of a cluster to a destination.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="an EtcdBackup's spec is immutable"
// +kubebuilder:validation:XValidation:rule="!has(self.prefixes) || self.type == 'keys-json'",message="prefixes are for keys-json backups only"
type EtcdBackupSpec struct {
	// Cluster names the EtcdCluster backed up.
	// +kubebuilder:validation:MinLength=1
	Cluster string `json:"cluster"`
	// Destination names the BackupDestination. Empty means default.
	// +optional
	Destination string `json:"destination,omitempty"`
	Logical     `json:",inline"`
	Encoding    `json:",inline"`
}

// ConditionSucceeded is the outcome of an EtcdBackup or an EtcdRestore:
// Unknown while Pending or Running, True once Completed, False once
// Failed. `kubectl wait --for=condition=Succeeded` waits for a good
// outcome.
const ConditionSucceeded = "Succeeded"

// EtcdBackupStatus is the outcome of a one-shot backup.
type EtcdBackupStatus struct {
	// Phase is Pending, Running, Completed or Failed.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Conditions has Succeeded.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// BackupID is the ID of the backup written.
	// +optional
	BackupID string `json:"backupID,omitempty"`
	// Message says why the backup failed.
	// +optional
	Message string `json:"message,omitempty"`
	// StartTime and CompletionTime bound the backup.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// StoredBytes is the size of the stored object.
	// +optional
	StoredBytes int64 `json:"storedBytes,omitempty"`
}

// EtcdBackup takes one backup of a cluster now. The backup's ID is
// "<cluster>-<namespace>-<name>-<hash>", the hash of the object's
// namespace, name and UID: another namespace, or the object deleted and
// created again, names another backup.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Backup",type=string,JSONPath=`.status.backupID`
type EtcdBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EtcdBackupSpec   `json:"spec"`
	Status EtcdBackupStatus `json:"status,omitempty"`
}

// EtcdBackupList is a list of EtcdBackups.
//
// +kubebuilder:object:root=true
type EtcdBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdBackup `json:"items"`
}
