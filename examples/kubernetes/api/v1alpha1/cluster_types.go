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
}

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
}

// EtcdCluster is a cluster whose etcd is backed up: its name is the
// cluster's name in every backup. Deleting it deletes its backups from
// every writable destination (a finalizer), except those an object lock
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
