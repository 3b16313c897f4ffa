package s3code

import "testing"

func TestNoSpace(t *testing.T) {
	for _, c := range []struct {
		code, message string
		want          bool
	}{
		{"XMinioStorageFull", "Storage backend has reached its minimum free drive threshold.", true},
		{"XMinioAdminBucketQuotaExceeded", "Bucket quota exceeded", true},
		{"QuotaExceeded", "", true},
		// What MinIO answered when its drive filled during a put.
		{"InternalError", "We encountered an internal error, please try again.: cause(no space left on device)", true},
		{"InternalError", "We encountered an internal error, please try again.: cause(disk quota exceeded)", true},
		{"InternalError", "We encountered an internal error, please try again.", false},
		{"AccessDenied", "no space left on device", false},
		{"SlowDown", "", false},
	} {
		if got := NoSpace(c.code, c.message); got != c.want {
			t.Errorf("NoSpace(%q, %q) = %v, want %v", c.code, c.message, got, c.want)
		}
	}
}
