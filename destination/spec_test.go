package destination_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

func TestSpecValidate(t *testing.T) {
	ok := destination.Spec{Name: "eu", URL: "s3://etcd-backups/eu?endpoint=127.0.0.1:9000&insecure=true"}
	lock := destination.ObjectLock{Mode: storage.Compliance, RetainFor: 24 * time.Hour}
	tests := []struct {
		name  string
		edit  func(*destination.Spec)
		want  error  // nil means valid
		field string // the *SpecError's field
	}{
		{name: "url", edit: func(*destination.Spec) {}},
		{name: "s3 fields", edit: func(s *destination.Spec) {
			*s = destination.Spec{Name: "eu", Endpoint: "http://minio:9000", Bucket: "etcd-backups", Prefix: "/seed/", Region: "eu-1"}
		}},
		{name: "s3 fields default endpoint", edit: func(s *destination.Spec) { *s = destination.Spec{Name: "eu", Bucket: "etcd-backups"} }},
		{name: "every option", edit: func(s *destination.Spec) {
			s.ReadOnly, s.CheckInterval, s.PollInterval, s.ObjectLock = true, time.Second, time.Minute, lock
			s.Encryption = s3.SSE{Mode: s3.SSEKMS, KMSKeyID: "key-1"}
			s.Credentials = destination.Credentials{Source: destination.SourceFiles, AccessKeyFile: "/a", SecretKeyFile: "/s"}
		}},
		{name: "empty name", edit: func(s *destination.Spec) { s.Name = "" }, want: backup.ErrInvalidName, field: "name"},
		{name: "uppercase name", edit: func(s *destination.Spec) { s.Name = "EU" }, want: backup.ErrInvalidName, field: "name"},
		{name: "slash in name", edit: func(s *destination.Spec) { s.Name = "a/b" }, want: backup.ErrInvalidName, field: "name"},
		{name: "fields without a bucket", edit: func(s *destination.Spec) { s.URL, s.Region = "", "eu-1" }, want: destination.ErrInvalidSpec, field: "bucket"},
		{name: "upper-case s3 bucket", edit: func(s *destination.Spec) { s.URL = "s3://MyBackups/seed" }, want: destination.ErrInvalidURL, field: "url"},
		{name: "url and fields", edit: func(s *destination.Spec) { s.Bucket = "other" }, want: destination.ErrInvalidSpec, field: "url"},
		{name: "bad url", edit: func(s *destination.Spec) { s.URL = "s3://bk1?nope=1" }, want: destination.ErrInvalidURL, field: "url"},
		{name: "credentials in url", edit: func(s *destination.Spec) { s.URL = "s3://k:s@bk1" }, want: destination.ErrCredentialsInURL, field: "url"},
		{name: "credentials in endpoint field", edit: func(s *destination.Spec) {
			*s = destination.Spec{Name: "eu", Endpoint: "http://k:s@minio:9000", Bucket: "etcd-backups"}
		}, want: destination.ErrCredentialsInURL, field: "endpoint"},
		{name: "bad endpoint field", edit: func(s *destination.Spec) {
			*s = destination.Spec{Name: "eu", Endpoint: "minio:9000/path", Bucket: "etcd-backups"}
		}, want: destination.ErrInvalidSpec, field: "endpoint"},
		{name: "bad prefix field", edit: func(s *destination.Spec) {
			*s = destination.Spec{Name: "eu", Bucket: "etcd-backups", Prefix: "a/../b"}
		}, want: storage.ErrInvalidKey, field: "prefix"},
		{name: "bad bucket field", edit: func(s *destination.Spec) { *s = destination.Spec{Name: "eu", Bucket: "x"} }, want: destination.ErrInvalidSpec, field: "bucket"},
		{name: "bad credentials", edit: func(s *destination.Spec) {
			s.Credentials = destination.Credentials{Source: destination.SourceFiles, AccessKeyFile: "/a"}
		}, want: destination.ErrInvalidSpec, field: "credentials"},
		{name: "credentials on file", edit: func(s *destination.Spec) {
			s.URL, s.Credentials = "file:///srv", destination.Credentials{Source: destination.SourceIAM}
		}, want: destination.ErrInvalidSpec, field: "credentials"},
		{name: "negative check interval", edit: func(s *destination.Spec) { s.CheckInterval = -time.Second }, want: destination.ErrInvalidSpec, field: "check interval"},
		{name: "negative poll interval", edit: func(s *destination.Spec) { s.PollInterval = -time.Second }, want: destination.ErrInvalidSpec, field: "poll interval"},
		{name: "lock without duration", edit: func(s *destination.Spec) { s.ObjectLock = destination.ObjectLock{Mode: storage.Governance} }, want: destination.ErrInvalidSpec, field: "object lock"},
		{name: "lock bad mode", edit: func(s *destination.Spec) {
			s.ObjectLock = destination.ObjectLock{Mode: "forever", RetainFor: time.Hour}
		}, want: destination.ErrInvalidSpec, field: "object lock"},
		{name: "lock duration without mode", edit: func(s *destination.Spec) { s.ObjectLock = destination.ObjectLock{RetainFor: time.Hour} }, want: destination.ErrInvalidSpec, field: "object lock"},
		{name: "lock on mem", edit: func(s *destination.Spec) { s.URL, s.ObjectLock = "mem://x", lock }, want: destination.ErrInvalidSpec, field: "object lock"},
		{name: "bad encryption", edit: func(s *destination.Spec) { s.Encryption = s3.SSE{Mode: "rot13"} }, want: destination.ErrInvalidSpec, field: "encryption"},
		{name: "kms key without kms", edit: func(s *destination.Spec) { s.Encryption = s3.SSE{Mode: s3.SSES3, KMSKeyID: "k"} }, want: destination.ErrInvalidSpec, field: "encryption"},
		{name: "encryption on gs", edit: func(s *destination.Spec) { s.URL, s.Encryption = "gs://bk1", s3.SSE{Mode: s3.SSES3} }, want: destination.ErrInvalidSpec, field: "encryption"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ok
			tt.edit(&s)
			err := s.Validate()
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.want)
			require.ErrorIs(t, err, destination.ErrInvalidSpec, "every spec problem matches ErrInvalidSpec")
			var se *destination.SpecError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tt.field, se.Field)
		})
	}
}

func TestSpecLocationFromFields(t *testing.T) {
	s := destination.Spec{Name: "eu", Endpoint: "http://MinIO.backup.svc:9000/", Bucket: "etcd-backups", Prefix: "seed-eu/", Region: "eu-1"}
	loc, err := s.Location()
	require.NoError(t, err)
	assert.Equal(t, destination.Location{Scheme: "s3", Bucket: "etcd-backups", Prefix: "seed-eu", Endpoint: "minio.backup.svc:9000",
		Region: "eu-1", Insecure: true}, loc)
	assert.Equal(t, "s3://etcd-backups/seed-eu?endpoint=minio.backup.svc:9000&insecure=true&region=eu-1", loc.String())
}

func TestCredentialsValidate(t *testing.T) {
	tests := []struct {
		name  string
		creds destination.Credentials
		ok    bool
	}{
		{"default", destination.Credentials{}, true},
		{"secret", destination.Credentials{Source: destination.SourceSecret, Secret: "kube-system/s3"}, true},
		{"secret without name", destination.Credentials{Source: destination.SourceSecret}, false},
		{"files", destination.Credentials{Source: destination.SourceFiles, AccessKeyFile: "/a", SecretKeyFile: "/s", SessionTokenFile: "/t"}, true},
		{"files without secret key", destination.Credentials{Source: destination.SourceFiles, AccessKeyFile: "/a"}, false},
		{"env standard names", destination.Credentials{Source: destination.SourceEnv}, true},
		{"env own names", destination.Credentials{Source: destination.SourceEnv, AccessKeyEnv: "EU_AK", SecretKeyEnv: "EU_SK"}, true},
		{"env one name", destination.Credentials{Source: destination.SourceEnv, AccessKeyEnv: "EU_AK"}, false},
		{"env token alone", destination.Credentials{Source: destination.SourceEnv, SessionTokenEnv: "EU_T"}, false},
		{"iam", destination.Credentials{Source: destination.SourceIAM, IAMEndpoint: "http://169.254.169.254"}, true},
		{"anonymous", destination.Credentials{Source: destination.SourceAnonymous}, true},
		{"revision alone", destination.Credentials{Revision: "42"}, true},
		{"unknown source", destination.Credentials{Source: "vault"}, false},
		{"secret name on files", destination.Credentials{Source: destination.SourceFiles, AccessKeyFile: "/a", SecretKeyFile: "/s", Secret: "x"}, false},
		{"files on default", destination.Credentials{AccessKeyFile: "/a", SecretKeyFile: "/s"}, false},
		{"iam endpoint on env", destination.Credentials{Source: destination.SourceEnv, IAMEndpoint: "http://x"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.creds.Validate()
			if tt.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}
