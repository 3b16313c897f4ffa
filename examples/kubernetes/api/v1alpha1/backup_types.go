package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Encoding is how a backup's bytes are stored.
type Encoding struct {
	// Compression of the stored bytes.
	// +kubebuilder:validation:Enum=zstd;gzip;none
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
	Keep     int32 `json:"keep,omitempty"`
	Encoding `json:",inline"`
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
type EtcdBackupSpec struct {
	// Cluster names the EtcdCluster backed up.
	// +kubebuilder:validation:MinLength=1
	Cluster string `json:"cluster"`
	// Destination names the BackupDestination. Empty means default.
	// +optional
	Destination string `json:"destination,omitempty"`
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
