package storage

import (
	"errors"
	"fmt"
)

// Sentinel errors. Backends wrap them (usually inside an *Error), so callers
// test with errors.Is whatever the backend.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errors.New("object not found")
	// ErrExist: the key exists and the operation required that it did not.
	ErrExist = errors.New("object already exists")
	// ErrInvalidKey: the key is not acceptable (see ValidateKey).
	ErrInvalidKey = errors.New("invalid object key")
	// ErrPermission: the store refused the credentials or the operation.
	ErrPermission = errors.New("permission denied")
	// ErrBucketNotFound: the bucket or container does not exist.
	ErrBucketNotFound = errors.New("bucket not found")
	// ErrLocked: an object lock or legal hold forbids the operation.
	ErrLocked = errors.New("object is locked")
	// ErrReadOnly: the bucket or destination refuses writes and deletes.
	ErrReadOnly = errors.New("read-only")
	// ErrUnsupported: the backend lacks the ability asked for.
	ErrUnsupported = errors.New("operation not supported by this backend")
	// ErrNoSpace: the store has no room for the write: a full file system
	// or an exhausted quota (ENOSPC, EDQUOT), an S3 store out of space
	// (507, XMinioStorageFull, or an InternalError caused by a full
	// drive). Nothing of the refused write is visible;
	// the same write can succeed once space is freed.
	ErrNoSpace = errors.New("no space left on the store")
)

// Error records a failed operation on one key. It unwraps to the cause,
// which matches one of the sentinels above whenever the failure has a
// meaning callers can act on.
type Error struct {
	Op  string // "put", "get", "stat", "list", "delete", ...
	Key string // the key, or the prefix for "list"
	Err error
}

// Error reports the operation, the key and the cause.
func (e *Error) Error() string {
	return fmt.Sprintf("%s %q: %v", e.Op, e.Key, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error for op on key whose cause wraps sentinel and err,
// so that errors.Is(result, sentinel) and errors.As on err's type both hold.
// A nil sentinel wraps err alone.
func Errorf(op, key string, sentinel, err error) error {
	switch {
	case sentinel == nil:
		return &Error{Op: op, Key: key, Err: err}
	case err == nil || errors.Is(err, sentinel):
		if err == nil {
			err = sentinel
		}
		return &Error{Op: op, Key: key, Err: err}
	default:
		return &Error{Op: op, Key: key, Err: fmt.Errorf("%w: %w", sentinel, err)}
	}
}
