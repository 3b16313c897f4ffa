package s3

import (
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/etcdbackup/etcdbackup/storage"
)

// A store's quota refusal is "no space", not a refusal of the credentials:
// Ceph RGW answers 403 QuotaExceeded for a user or bucket quota, MinIO 400
// XMinioAdminBucketQuotaExceeded for a bucket quota.
func TestSentinelOfQuotaExceededIsNoSpace(t *testing.T) {
	for _, r := range []minio.ErrorResponse{
		{Code: "QuotaExceeded", StatusCode: 403},
		{Code: "XMinioAdminBucketQuotaExceeded", StatusCode: 400},
		{Code: "XMinioStorageFull", StatusCode: 507},
		{Code: "InternalError", StatusCode: 500, Message: "We encountered an internal error, please try again.: cause(no space left on device)"},
	} {
		if got := sentinelOf(r); got != storage.ErrNoSpace {
			t.Errorf("%s (%d) classified as %v, want ErrNoSpace", r.Code, r.StatusCode, got)
		}
	}
}
