package blob

import (
	"errors"
	"fmt"
	"syscall"

	"gocloud.dev/gcerrors"

	"github.com/etcdbackup/etcdbackup/internal/s3code"
	"github.com/etcdbackup/etcdbackup/storage"
)

// errorf translates an error of gocloud about key into a *storage.Error
// whose cause matches the storage sentinel for its gcerrors code. exclusive
// says the operation was a put with IfNotExist, for which a failed
// precondition means the key exists.
func (b *Bucket) errorf(op, key string, err error, exclusive bool) error {
	if err == nil {
		return nil
	}
	var sentinel error
	switch gcerrors.Code(err) {
	case gcerrors.NotFound:
		sentinel = storage.ErrNotFound
		if b.bucketMissing(err) {
			sentinel = storage.ErrBucketNotFound
		}
	case gcerrors.PermissionDenied:
		sentinel = storage.ErrPermission
	case gcerrors.AlreadyExists:
		sentinel = storage.ErrExist
	case gcerrors.FailedPrecondition:
		if exclusive {
			sentinel = storage.ErrExist
		}
	case gcerrors.Unimplemented:
		sentinel = storage.ErrUnsupported
	case gcerrors.Unknown:
		switch {
		case b.kind == driverFile:
			sentinel, err = fileError(op, err)
		case b.noSpace(err):
			// Before authFailure: Ceph RGW refuses a quota with 403.
			sentinel = storage.ErrNoSpace
		case b.authFailure(err):
			sentinel = storage.ErrPermission
		}
	}
	return storage.Errorf(op, key, sentinel, err)
}

// apiError is the part of smithy.APIError (AWS SDK errors) errorf uses.
type apiError interface {
	ErrorCode() string
	ErrorMessage() string
}

// httpError is the part of the AWS SDK's HTTP response errors errorf uses.
type httpError interface {
	HTTPStatusCode() int
}

// authFailure reports whether err is a refusal of the credentials, which
// s3blob leaves as Unknown unless the code is AccessDenied, and azureblob
// unless it is AuthenticationFailed or AuthorizationFailure.
func (b *Bucket) authFailure(err error) bool {
	var ae apiError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "AccessDenied", "Forbidden", "SignatureDoesNotMatch", "InvalidAccessKeyId",
			"ExpiredToken", "InvalidToken", "TokenRefreshRequired", "AllAccessDisabled":
			return true
		}
	}
	var he httpError
	if errors.As(err, &he) {
		switch he.HTTPStatusCode() {
		case 401, 403:
			return true
		}
	}
	if b.opts.ErrorCode != nil {
		if status, _, ok := b.opts.ErrorCode(err); ok && (status == 401 || status == 403) {
			return true
		}
	}
	return false
}

// noSpace reports whether err is a store's refusal for lack of space: an
// S3 error code s3code.NoSpace knows, or status 507.
func (b *Bucket) noSpace(err error) bool {
	var ae apiError
	if errors.As(err, &ae) && s3code.NoSpace(ae.ErrorCode(), ae.ErrorMessage()) {
		return true
	}
	var he httpError
	if errors.As(err, &he) && he.HTTPStatusCode() == 507 {
		return true
	}
	if b.opts.ErrorCode != nil {
		if status, _, ok := b.opts.ErrorCode(err); ok && status == 507 {
			return true
		}
	}
	return false
}

// bucketMissing reports whether a NotFound error is about the bucket rather
// than the object.
func (b *Bucket) bucketMissing(err error) bool {
	var ae apiError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchBucket", "ContainerNotFound":
			return true
		}
	}
	if b.opts.ErrorCode != nil {
		if _, code, ok := b.opts.ErrorCode(err); ok && code == "ContainerNotFound" {
			return true
		}
	}
	return false
}

// fileError classifies the file-system errors fileblob leaves as Unknown.
// On a file system a key cannot be both a file and the folder of other
// keys: "a/b" and "a/b/c" cannot coexist.
func fileError(op string, err error) (error, error) {
	collision := errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR) ||
		errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY)
	switch {
	case collision && op != "put":
		// A parent of the key is a file, so the key cannot exist.
		return storage.ErrNotFound, err
	case collision:
		return storage.ErrInvalidKey, fmt.Errorf("on a file system a key cannot also be the folder of other keys: %w", err)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EROFS):
		return storage.ErrPermission, err
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return storage.ErrNoSpace, err
	}
	return nil, err
}
