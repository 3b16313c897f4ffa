package miniotest

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
)

// RestrictedCredentials returns temporary credentials of the server's root
// user narrowed by policy, an IAM policy document in JSON: MinIO's STS
// AssumeRole with a session policy. A test uses them to see what the code
// does when the store refuses some requests, as a key with a narrower IAM
// policy meets on Amazon S3. The credentials last an hour. It needs a
// server of Start (plain HTTP).
func (s *Server) RestrictedCredentials(tb testing.TB, policy string) (access, secret, token string) {
	tb.Helper()
	// A server just started may answer "Server not initialized" until its
	// IAM subsystem has loaded.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := credentials.NewSTSAssumeRole(s.url(), credentials.STSAssumeRoleOptions{
			AccessKey:       s.access,
			SecretKey:       s.secret,
			Policy:          policy,
			Location:        "us-east-1",
			DurationSeconds: int(time.Hour / time.Second),
		})
		if err != nil {
			tb.Fatalf("miniotest: assume role: %v", err)
		}
		v, err := c.GetWithContext(&credentials.CredContext{Client: &http.Client{Timeout: 30 * time.Second}})
		if err == nil {
			return v.AccessKeyID, v.SecretAccessKey, v.SessionToken
		}
		if !strings.Contains(err.Error(), "not initialized") || time.Now().After(deadline) {
			tb.Fatalf("miniotest: assume role: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling the server's readiness
	}
}
