package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EtcdClusterSpec says how to reach a cluster's etcd.
type EtcdClusterSpec struct {
	// Endpoints are the etcd client URLs.
	// +kubebuilder:validation:MinItems=1
	Endpoints []string `json:"endpoints"`
	// TLS configures client TLS, with files the controller's pod mounts
	// (the cluster's etcd client certificate Secret). Nil means plain
	// connections, or the system's roots for https endpoints.
	// +optional
	TLS *EtcdTLS `json:"tls,omitempty"`
	// DeletionPolicy says what deleting the EtcdCluster does to its
	// backups. Retain (the default) leaves them on every destination, to
	// be restored or deleted by hand. Delete deletes them from every
	// writable destination once DeletionGracePeriod has passed, except
	// those an object lock or a restore in progress protects.
	// +kubebuilder:validation:Enum=Retain;Delete
	// +kubebuilder:default=Retain
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
	// DeletionGracePeriod is how long after the deletion a Delete policy
	// waits before deleting anything: setting deletionPolicy back to
	// Retain in that time keeps every backup. Zero deletes at once.
	// +optional
	DeletionGracePeriod *metav1.Duration `json:"deletionGracePeriod,omitempty"`
	// TeardownTimeout bounds a Delete policy's teardown: a destination
	// whose backups could not be deleted that long after the grace period
	// ended is skipped, its backups left in place, with a Warning Event
	// (BackupsLeft), and the EtcdCluster goes. Zero means one hour.
	// +optional
	TeardownTimeout *metav1.Duration `json:"teardownTimeout,omitempty"`
}

// DeletionPolicy is what deleting an EtcdCluster does to its backups.
type DeletionPolicy string

// The deletion policies.
const (
	// DeletionRetain keeps the cluster's backups.
	DeletionRetain DeletionPolicy = "Retain"
	// DeletionDelete deletes them after the grace period.
	DeletionDelete DeletionPolicy = "Delete"
)

// EtcdTLS names the files of an etcd client's TLS, as the controller's
// pod mounts them. They are read at each backup, so rotated certificates
// are picked up.
type EtcdTLS struct {
	// CAFile holds the PEM certificates of the authorities that sign the
	// members' certificates.
	// +optional
	CAFile string `json:"caFile,omitempty"`
	// CertFile and KeyFile hold the client certificate and its key.
	// +optional
	CertFile string `json:"certFile,omitempty"`
	// +optional
	KeyFile string `json:"keyFile,omitempty"`
	// ServerName verifies the members' certificates for another name than
	// the endpoints' host.
	// +optional
	ServerName string `json:"serverName,omitempty"`
}

// EtcdClusterStatus is what the controller knows of a cluster.
type EtcdClusterStatus struct {
	// Conditions has TornDown while the cluster is being deleted.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// EtcdCluster is a cluster whose etcd is backed up: its name is the
// cluster's name in every backup. Deleting it keeps its backups, unless
// its deletionPolicy is Delete: then a finalizer deletes them from every
// writable destination after a grace period, except those an object lock
// still protects.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63",message="a cluster's name is a DNS label: lowercase letters, digits and '-', at most 63"
type EtcdCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EtcdClusterSpec   `json:"spec"`
	Status EtcdClusterStatus `json:"status,omitempty"`
}

// EtcdClusterList is a list of EtcdClusters.
//
// +kubebuilder:object:root=true
type EtcdClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdCluster `json:"items"`
}
