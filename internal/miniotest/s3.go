package miniotest

import "github.com/etcdbackup/etcdbackup/storage/s3"

// S3Options returns the storage/s3 options that reach bucket on the server
// with its root credentials: plain HTTP (HTTPS trusting the server's
// authority for a server of StartTLS), path-style requests, us-east-1.
// Tests adjust the copy (part size, retries, a proxy's endpoint).
func (s *Server) S3Options(bucket string) s3.Options {
	return s3.Options{
		Endpoint:     s.Endpoint(),
		Bucket:       bucket,
		Region:       "us-east-1",
		Insecure:     !s.secure(),
		CACertFile:   s.caFile,
		BucketLookup: s3.LookupPath,
		Credentials:  s3.StaticCredentials(s.AccessKey(), s.SecretKey(), ""),
	}
}
