package controller

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdbackup/etcdbackup/examples/kubernetes/api/v1alpha1"
)

// TestAmbientCredentialsEndpoints: a BackupDestination without a
// credentials Secret may name its cloud's own endpoint (a workload
// identity or an IAM role on Amazon S3's regional endpoint, GCS, Azure's
// public cloud), and is refused with any other endpoint, which the
// controller's own credentials must not reach.
func TestAmbientCredentialsEndpoints(t *testing.T) {
	d := &destinations{namespace: "ops"}
	for url, refused := range map[string]bool{
		"s3://backups":                                                   false,
		"s3://backups?region=eu-west-1":                                  false,
		"s3://backups?endpoint=s3.amazonaws.com":                         false,
		"s3://backups?endpoint=s3.eu-west-1.amazonaws.com":               false,
		"s3://backups?endpoint=https://s3.eu-west-1.amazonaws.com:443":   false,
		"s3://backups?endpoint=s3.dualstack.eu-west-1.amazonaws.com":     false,
		"gs://backups?endpoint=storage.googleapis.com":                   false,
		"azblob://backups?account=acct&endpoint=blob.core.windows.net":   false,
		"s3://backups?endpoint=minio.example.com:9000":                   true,
		"s3://backups?endpoint=s3.eu-west-1.amazonaws.com&insecure=true": true,
		"s3://backups?endpoint=ec2-1-2-3-4.compute-1.amazonaws.com":      true,
		"s3://backups?endpoint=s3.eu-west-1.amazonaws.com.evil.example":  true,
		"gs://backups?endpoint=gcs.example.com":                          true,
		"azblob://backups?account=acct&endpoint=blob.evil.example":       true,
		// The other partitions' and FIPS endpoints are Amazon's own too,
		// and Azure's government and China clouds and private link
		// domains Microsoft's.
		"s3://backups?endpoint=s3-fips.us-east-1.amazonaws.com":                    false,
		"s3://backups?endpoint=s3-fips.dualstack.us-gov-west-1.amazonaws.com":      false,
		"s3://backups?endpoint=s3.cn-north-1.amazonaws.com.cn":                     false,
		"s3://backups?endpoint=s3.dualstack.cn-northwest-1.amazonaws.com.cn":       false,
		"s3://backups?endpoint=S3.US-GOV-WEST-1.AMAZONAWS.COM.":                    false,
		"s3://backups?endpoint=s3.cn-north-1.amazonaws.com.cn.evil.example":        true,
		"s3://backups?endpoint=s3-fips.us-east-1.amazonaws.com.evil":               true,
		"s3://backups?endpoint=s3.amazonaws.com:8443":                              true,
		"s3://backups?endpoint=[::1]:443":                                          true,
		"azblob://backups?account=acct&endpoint=blob.core.usgovcloudapi.net":       false,
		"azblob://backups?account=acct&endpoint=blob.core.chinacloudapi.cn":        false,
		"azblob://backups?account=acct&endpoint=privatelink.blob.core.windows.net": false,
		"azblob://backups?account=acct&endpoint=blob.core.windows.net.evil":        true,
		"azblob://backups?account=acct&endpoint=evilblob.core.windows.net":         true,
		"azblob://backups?account=acct&endpoint=blob.core.windows.net:8443":        true,
	} {
		o := &v1alpha1.BackupDestination{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Spec: v1alpha1.BackupDestinationSpec{URL: url}}
		_, err := d.spec(t.Context(), o)
		if got := errors.Is(err, errAmbientCredentials); got != refused {
			t.Errorf("%s: refused %t (%v), want %t", url, got, err, refused)
		}
	}
	// The account is the first label of the service's host
	// (https://ACCOUNT.blob.core.windows.net): one that ends the host
	// early names another server, with or without an endpoint.
	for _, url := range []string{
		"azblob://backups?account=evil.example%2F",
		"azblob://backups?account=evil.example%23&endpoint=blob.core.windows.net",
		"azblob://backups?account=me%40evil.example%3F",
	} {
		o := &v1alpha1.BackupDestination{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Spec: v1alpha1.BackupDestinationSpec{URL: url}}
		if _, err := d.spec(t.Context(), o); err == nil {
			t.Errorf("%s: accepted without a credentials Secret", url)
		}
	}
}
