// Package s3code classifies the error codes of S3-compatible stores, for
// the two S3 backends (storage/s3 on minio-go, storage/blob on s3blob).
package s3code

import "strings"

// NoSpace reports whether an S3 error, given by its code and message, is a
// refusal for lack of space: MinIO answers 507 XMinioStorageFull when its
// drives are full, 400 XMinioAdminBucketQuotaExceeded over a bucket quota
// and, when a drive fills during the write, 500 InternalError whose
// message ends with the cause ("cause(no space left on device)"); Ceph
// RGW answers 403 QuotaExceeded over a user or bucket quota.
func NoSpace(code, message string) bool {
	switch code {
	case "XMinioStorageFull", "XMinioAdminBucketQuotaExceeded", "QuotaExceeded":
		return true
	case "InternalError":
		m := strings.ToLower(message)
		return strings.Contains(m, "no space left on device") || strings.Contains(m, "disk quota exceeded")
	}
	return false
}
