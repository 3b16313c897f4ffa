package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultDestination names the destination that backup configs and
// restores use when they name none. It cannot be deleted.
const DefaultDestination = "default"

// Condition types and reasons of this package's resources.
const (
	// ConditionAvailable is a BackupDestination's availability, as the
	// registry's last check found it. Its reason is the library's
	// (destination.Reason) when False.
	ConditionAvailable = "Available"
	// ConditionAccepted says whether the controller accepted the object's
	// spec; when False its message says why.
	ConditionAccepted = "Accepted"
	// ConditionBackupSucceeded says whether the last backup of a config
	// succeeded.
	ConditionBackupSucceeded = "BackupSucceeded"
	// ConditionDrillSucceeded says whether the last restore drill of a
	// config passed.
	ConditionDrillSucceeded = "DrillSucceeded"
	// ConditionTornDown is set on an EtcdCluster being deleted: False
	// while its backups could not all be deleted.
	ConditionTornDown = "TornDown"
)

// SecretReference names a Secret. The Secret holds the keys accessKeyID
// and secretAccessKey, and optionally sessionToken.
type SecretReference struct {
	// Namespace is the controller's own namespace, the only one it reads
	// credentials Secrets from: a destination naming another is refused,
	// and its Secret is never read. Empty means the controller's
	// namespace.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// BackupDestinationSpec is where backups go.
type BackupDestinationSpec struct {
	// URL locates the destination: s3://bucket/prefix?endpoint=host:port,
	// gs://, azblob://, file:// (see destination.ParseURL). No two
	// destinations may share or nest their locations.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`
	// CredentialsSecretRef names the Secret with the destination's keys,
	// in the controller's namespace. Without it the store's default credentials chain is used
	// (the controller's own variables, its cloud identity), and the URL may name no endpoint
	// other than its cloud's public one: such a destination is refused (CredentialsSecretNeeded).
	// +optional
	CredentialsSecretRef *SecretReference `json:"credentialsSecretRef,omitempty"`
	// PollInterval is the time between inventory syncs. Zero means the
	// controller's default.
	// +optional
	PollInterval *metav1.Duration `json:"pollInterval,omitempty"`
	// CheckInterval is the time between availability checks. Zero means
	// the controller's default.
	// +optional
	CheckInterval *metav1.Duration `json:"checkInterval,omitempty"`
	// ReadOnly makes backups, retention and teardown leave the destination
	// alone; restores still read it.
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`
	// ObjectLock locks every backup written to the destination for a
	// while: nobody deletes it before, not retention, not a cluster's
	// teardown. The bucket must have object lock enabled (s3 only).
	// +optional
	ObjectLock *ObjectLock `json:"objectLock,omitempty"`
}

// ObjectLock is the S3 object lock put on every backup written.
type ObjectLock struct {
	// Mode is GOVERNANCE (users with a special permission may still
	// delete) or COMPLIANCE (nobody may).
	// +kubebuilder:validation:Enum=GOVERNANCE;COMPLIANCE
	Mode string `json:"mode"`
	// RetainFor is how long after writing a backup stays locked.
	RetainFor metav1.Duration `json:"retainFor"`
}

// BackupDestinationStatus is what the controller knows of a destination.
type BackupDestinationStatus struct {
	// Conditions are Accepted and Available.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastSync is when the inventory was last synced successfully.
	// +optional
	LastSync *metav1.Time `json:"lastSync,omitempty"`
	// Backups counts the backups found at the last sync.
	// +optional
	Backups int32 `json:"backups"`
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// BackupDestination is a named place backups go to. Its name is recorded
// in every backup written to it and never changes; the one named default
// is used by configs that name none and cannot be deleted.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=bdest
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.spec.url`
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].status`
// +kubebuilder:printcolumn:name="Backups",type=integer,JSONPath=`.status.backups`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63",message="a destination's name is a DNS label: lowercase letters, digits and '-', at most 63"
type BackupDestination struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BackupDestinationSpec   `json:"spec"`
	Status BackupDestinationStatus `json:"status,omitempty"`
}

// BackupDestinationList is a list of BackupDestinations.
//
// +kubebuilder:object:root=true
type BackupDestinationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BackupDestination `json:"items"`
}
