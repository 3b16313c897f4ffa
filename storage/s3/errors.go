package s3

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/etcdbackup/etcdbackup/internal/s3code"
	"github.com/etcdbackup/etcdbackup/storage"
)

// ErrTooLarge is returned by Put when the stream does not fit in MaxParts
// parts, which every stream of up to MaxParts x Options.PartSize bytes
// does. Nothing is left behind: the multipart upload is aborted.
var ErrTooLarge = errors.New("object too large for a multipart upload")

// ErrLockUnknown is returned by Delete, with storage.ErrPermission, when
// the credentials may read neither the bucket's object lock configuration
// nor the object's retention or legal hold. On a bucket with object lock a
// DELETE without a version would succeed and only hide a locked or held
// object behind a delete marker, so Delete refuses rather than guess.
// Grant s3:GetBucketObjectLockConfiguration, or set
// Options.DeleteAllVersions, which deletes every version and so meets any
// lock.
var ErrLockUnknown = errors.New("cannot tell whether the object may be locked")

// translate wraps a minio-go error in a *storage.Error whose cause matches
// the storage sentinel for the S3 error code, while the minio.ErrorResponse
// stays reachable with errors.As.
func translate(op, key string, err error) error {
	if err == nil {
		return nil
	}
	return storage.Errorf(op, key, sentinelOf(err), err)
}

// sentinelOf maps an S3 error to a storage sentinel, or nil.
func sentinelOf(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	var resp minio.ErrorResponse
	if !errors.As(err, &resp) {
		return nil
	}
	if isLockRefusal(resp) {
		return storage.ErrLocked
	}
	if s3code.NoSpace(resp.Code, resp.Message) {
		// Before the status: Ceph RGW refuses a quota with 403.
		return storage.ErrNoSpace
	}
	switch resp.Code {
	case "NoSuchKey", "NoSuchVersion", "NotFound":
		return storage.ErrNotFound
	case "NoSuchBucket":
		return storage.ErrBucketNotFound
	case "AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch",
		"InvalidToken", "ExpiredToken", "TokenRefreshRequired", "AccountProblem",
		"InvalidSecurity":
		return storage.ErrPermission
	case "PreconditionFailed":
		return storage.ErrExist
	case "NotImplemented", "XMinioNotImplemented":
		return storage.ErrUnsupported
	}
	if isLockMissing(resp) {
		return storage.ErrUnsupported
	}
	switch resp.StatusCode {
	case http.StatusNotFound:
		return storage.ErrNotFound
	case http.StatusForbidden, http.StatusUnauthorized:
		return storage.ErrPermission
	case http.StatusPreconditionFailed:
		return storage.ErrExist
	case http.StatusNotImplemented:
		return storage.ErrUnsupported
	case http.StatusInsufficientStorage:
		return storage.ErrNoSpace
	}
	return nil
}

// isLockRefusal reports an object-lock refusal. MinIO answers 400
// InvalidRequest "Object is WORM protected and cannot be overwritten";
// Amazon S3 answers 403 AccessDenied "Access Denied because object
// protected by object lock".
func isLockRefusal(resp minio.ErrorResponse) bool {
	if resp.Code == "ObjectLocked" {
		return true
	}
	msg := strings.ToLower(resp.Message)
	return strings.Contains(msg, "worm protected") ||
		strings.Contains(msg, "protected by object lock")
}

// isLockMissing reports a lock operation on a bucket without object lock:
// "Bucket is missing ObjectLockConfiguration" (MinIO) or "Bucket is missing
// Object Lock Configuration" (Amazon S3).
func isLockMissing(resp minio.ErrorResponse) bool {
	msg := strings.ReplaceAll(strings.ToLower(resp.Message), " ", "")
	return strings.Contains(msg, "missingobjectlockconfiguration")
}

// isLockMissingErr is isLockMissing for any error.
func isLockMissingErr(err error) bool {
	var resp minio.ErrorResponse
	return errors.As(err, &resp) && isLockMissing(resp)
}

// errCode returns the S3 error code of err, or "".
func errCode(err error) string {
	var resp minio.ErrorResponse
	if errors.As(err, &resp) {
		return resp.Code
	}
	return ""
}

// ctxError returns ctx's error so that errors.Is(err, context.Canceled)
// (or DeadlineExceeded) holds, carrying the cancellation cause too when the
// canceller gave one.
func ctxError(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, err) {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}
