package blob

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/storage"
)

// s3Error stands for an AWS SDK error: its code and HTTP status.
type s3Error struct {
	code   string
	status int
	msg    string
}

func (e s3Error) Error() string        { return e.code + ": " + e.msg }
func (e s3Error) ErrorCode() string    { return e.code }
func (e s3Error) ErrorMessage() string { return e.msg }
func (e s3Error) HTTPStatusCode() int  { return e.status }

// A store's quota refusal is "no space", not a refusal of the credentials,
// though Ceph RGW answers it with 403.
func TestErrorfQuotaExceededIsNoSpace(t *testing.T) {
	b := &Bucket{kind: driverS3}
	for _, e := range []s3Error{
		{"QuotaExceeded", 403, ""},
		{"XMinioAdminBucketQuotaExceeded", 400, ""},
		{"XMinioStorageFull", 507, ""},
		// MinIO's answer when its drive fills during the write.
		{"InternalError", 500, "We encountered an internal error, please try again.: cause(no space left on device)"},
	} {
		err := b.errorf("put", "k", e, false)
		require.ErrorIs(t, err, storage.ErrNoSpace, "%s (%d)", e.code, e.status)
		require.NotErrorIs(t, err, storage.ErrPermission, "%s (%d)", e.code, e.status)
	}
	require.ErrorIs(t, b.errorf("put", "k", s3Error{"AccessDenied", 403, ""}, false), storage.ErrPermission)
	require.NotErrorIs(t, b.errorf("put", "k", s3Error{"InternalError", 500, "We encountered an internal error, please try again."}, false), storage.ErrNoSpace)
}
