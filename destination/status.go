package destination

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"syscall"
	"time"

	"github.com/etcdbackup/etcdbackup/storage"
)

// State is a destination's availability.
type State string

// The availability states.
const (
	// StateUnknown: not checked yet (just added, or moved to another
	// location).
	StateUnknown State = "Unknown"
	// StateAvailable: the last check listed the destination.
	StateAvailable State = "Available"
	// StateUnavailable: the last check failed; Status.Reason says why.
	StateUnavailable State = "Unavailable"
)

// Reason says why a destination is unavailable.
type Reason string

// The reasons of unavailability.
const (
	// ReasonAuth: the store refused the credentials or the access, or the
	// credentials could not be resolved.
	ReasonAuth Reason = "auth"
	// ReasonMissingBucket: the bucket, container or directory does not
	// exist.
	ReasonMissingBucket Reason = "missing-bucket"
	// ReasonUnreachable: the store could not be reached (connection
	// refused or reset, no route, unknown host).
	ReasonUnreachable Reason = "unreachable"
	// ReasonTimeout: the store did not answer within the check timeout.
	ReasonTimeout Reason = "timeout"
	// ReasonNoSpace: the store refused a write for lack of space (a full
	// file system, a quota, an S3 store out of space).
	ReasonNoSpace Reason = "no-space"
	// ReasonNotConfigured: the destination has no URL yet.
	ReasonNotConfigured Reason = "not-configured"
	// ReasonError: any other failure; Status.Message says what.
	ReasonError Reason = "error"
)

// maxMessage bounds Status.Message.
const maxMessage = 512

// Status is a destination's availability, as its last check found it: what
// a host shows as the destination's Unavailable condition.
type Status struct {
	// State is Unknown, Available or Unavailable.
	State State
	// Reason says why the destination is unavailable; empty otherwise.
	Reason Reason
	// Message describes the failure for people. It never holds a
	// credential.
	Message string
	// LastCheck is when the last check ended; zero before the first.
	LastCheck time.Time
	// LastTransition is when State or Reason last changed.
	LastTransition time.Time
	// ConsecutiveFailures counts the checks that failed since the last
	// one that succeeded.
	ConsecutiveFailures int
}

// Available reports whether the last check succeeded.
func (s Status) Available() bool { return s.State == StateAvailable }

// next returns the status after a check that ended at now with err, and
// whether State or Reason changed.
func (s Status) next(err error, now time.Time) (Status, bool) {
	n := s
	n.LastCheck = now
	if err == nil {
		n.State, n.Reason, n.Message, n.ConsecutiveFailures = StateAvailable, "", "", 0
	} else {
		n.State, n.Reason, n.Message = StateUnavailable, Classify(err), message(err)
		n.ConsecutiveFailures++
	}
	changed := n.State != s.State || n.Reason != s.Reason
	if changed {
		n.LastTransition = now
	}
	return n, changed
}

func message(err error) string {
	msg := err.Error()
	if len(msg) > maxMessage {
		msg = msg[:maxMessage] + "..."
	}
	return msg
}

// Classify returns the Reason for a failed check's error.
func Classify(err error) Reason {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrNotConfigured):
		return ReasonNotConfigured
	case errors.Is(err, storage.ErrPermission), errors.Is(err, ErrCredentials), errors.Is(err, fs.ErrPermission):
		return ReasonAuth
	case errors.Is(err, storage.ErrBucketNotFound), errors.Is(err, fs.ErrNotExist):
		return ReasonMissingBucket
	case errors.Is(err, storage.ErrNoSpace):
		return ReasonNoSpace
	case isTimeout(err):
		return ReasonTimeout
	case isUnreachable(err):
		return ReasonUnreachable
	}
	return ReasonError
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ETIMEDOUT) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isUnreachable(err error) bool {
	for _, target := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
		syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EHOSTDOWN, syscall.ENETDOWN, syscall.EPIPE,
		io.EOF, io.ErrUnexpectedEOF} {
		if errors.Is(err, target) {
			return true
		}
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op)
}
