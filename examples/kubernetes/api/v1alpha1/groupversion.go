package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of this package's resources.
var GroupVersion = schema.GroupVersion{Group: "backup.etcdbackup.io", Version: "v1alpha1"}

// AddToScheme adds this package's resources to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&BackupDestination{}, &BackupDestinationList{},
		&EtcdCluster{}, &EtcdClusterList{},
		&EtcdBackupConfig{}, &EtcdBackupConfigList{},
		&EtcdBackup{}, &EtcdBackupList{},
		&EtcdRestore{}, &EtcdRestoreList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
