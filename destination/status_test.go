package destination_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/storage"
)

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

func TestClassify(t *testing.T) {
	list := func(err error) error { return storage.Errorf("list", "", nil, err) }
	tests := []struct {
		name string
		err  error
		want destination.Reason
	}{
		{"permission", storage.Errorf("list", "", storage.ErrPermission, errors.New("SignatureDoesNotMatch")), destination.ReasonAuth},
		{"credentials", fmt.Errorf("open: %w", destination.ErrCredentials), destination.ReasonAuth},
		{"file permission", &fs.PathError{Op: "open", Path: "/x", Err: fs.ErrPermission}, destination.ReasonAuth},
		{"no bucket", storage.Errorf("list", "", storage.ErrBucketNotFound, nil), destination.ReasonMissingBucket},
		{"no directory", &fs.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}, destination.ReasonMissingBucket},
		{"no space", storage.Errorf("put", "k", storage.ErrNoSpace, &fs.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}), destination.ReasonNoSpace},
		{"deadline", list(context.DeadlineExceeded), destination.ReasonTimeout},
		{"dial timeout", list(&net.OpError{Op: "dial", Net: "tcp", Err: timeoutError{}}), destination.ReasonTimeout},
		{"refused", list(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), destination.ReasonUnreachable},
		{"reset", list(syscall.ECONNRESET), destination.ReasonUnreachable},
		{"dns", list(&net.DNSError{Err: "no such host", Name: "minio", IsNotFound: true}), destination.ReasonUnreachable},
		{"eof", list(io.ErrUnexpectedEOF), destination.ReasonUnreachable},
		{"other", list(errors.New("InternalError")), destination.ReasonError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, destination.Classify(tt.err))
		})
	}
	assert.Equal(t, destination.Reason(""), destination.Classify(nil))
}
