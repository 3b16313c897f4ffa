// Package v1alpha1 holds the API of the backup.etcdbackup.io group: the
// Kubernetes resources a seed's controller-manager reconciles with the
// etcdbackup library.
//
//	BackupDestination  a named place backups go to (cluster-scoped)
//	EtcdCluster        a cluster whose etcd is backed up (cluster-scoped);
//	                   deleting it keeps its backups, unless deletionPolicy is Delete
//	EtcdBackupConfig   a backup schedule (or one backup) of a cluster to a destination
//	EtcdBackup         one backup, now
//	EtcdRestore        one restore of a member's data directory
//
// +kubebuilder:object:generate=true
// +groupName=backup.etcdbackup.io
package v1alpha1
