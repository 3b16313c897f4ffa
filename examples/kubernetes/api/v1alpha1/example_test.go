package v1alpha1_test

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
)

// A backup config: the cluster prod-a backed up hourly to the destination
// default, keeping 24.
func ExampleEtcdBackupConfig() {
	bc := v1alpha1.EtcdBackupConfig{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "EtcdBackupConfig"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "cluster-prod-a", Name: "hourly"},
		Spec: v1alpha1.EtcdBackupConfigSpec{Cluster: "prod-a", Destination: v1alpha1.DefaultDestination,
			Schedule: "@hourly", Keep: 24},
	}
	b, err := json.Marshal(bc.Spec)
	if err != nil {
		panic(err)
	}
	fmt.Println(bc.APIVersion, bc.Kind)
	fmt.Println(string(b))
	// Output:
	// backup.etcdbackup.io/v1alpha1 EtcdBackupConfig
	// {"cluster":"prod-a","destination":"default","schedule":"@hourly","keep":24}
}
