package s3

import (
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// The constructors below return minio-go credentials, which fetch and
// cache their value on first use and refresh it when it expires. None of
// them touches the network or the file system before the first request.

// StaticCredentials returns fixed credentials. sessionToken is empty for
// long-lived keys.
func StaticCredentials(accessKey, secretKey, sessionToken string) *credentials.Credentials {
	return credentials.NewStaticV4(accessKey, secretKey, sessionToken)
}

// FileCredentials reads a profile of an AWS shared credentials file. An
// empty path means $AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials;
// an empty profile means $AWS_PROFILE, else "default".
func FileCredentials(path, profile string) *credentials.Credentials {
	return credentials.NewFileAWSCredentials(path, profile)
}

// EnvCredentials reads AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
// AWS_SESSION_TOKEN (or their AWS_ACCESS_KEY / AWS_SECRET_KEY spellings),
// and, when those are unset, MinIO's MINIO_ROOT_USER / MINIO_ROOT_PASSWORD
// (or MINIO_ACCESS_KEY / MINIO_SECRET_KEY).
func EnvCredentials() *credentials.Credentials {
	return ChainCredentials(
		credentials.New(&credentials.EnvAWS{}),
		credentials.New(&credentials.EnvMinio{}),
	)
}

// IAMCredentials fetches temporary credentials of the role the process
// runs as: a web identity token (EKS IRSA), the ECS task role or the EC2
// instance profile. An empty endpoint means the standard metadata
// endpoints.
func IAMCredentials(endpoint string) *credentials.Credentials {
	return credentials.NewIAM(endpoint)
}

// ChainCredentials tries each source in order and uses the first that
// yields an access key, until its credentials expire; then it tries again
// from the first. A source that fails is skipped, as one with no key is
// (a secret without an access key counts as none). When no source yields a
// key, requests go unsigned, and a private bucket answers with
// storage.ErrPermission.
func ChainCredentials(sources ...*credentials.Credentials) *credentials.Credentials {
	c := &chain{}
	for _, s := range sources {
		if s != nil {
			c.sources = append(c.sources, s)
		}
	}
	return credentials.New(c)
}

// DefaultCredentials is the chain used when Options.Credentials is nil:
// EnvCredentials, then FileCredentials("", ""), then IAMCredentials("").
func DefaultCredentials() *credentials.Credentials {
	return ChainCredentials(EnvCredentials(), FileCredentials("", ""), IAMCredentials(""))
}

// chain is the credentials.Provider of ChainCredentials. The
// *credentials.Credentials wrapping it serialises its calls.
type chain struct {
	sources []*credentials.Credentials
	current *credentials.Credentials // the source in use, or nil
}

func (c *chain) RetrieveWithCredContext(cc *credentials.CredContext) (credentials.Value, error) {
	for _, s := range c.sources {
		v, err := s.GetWithContext(cc)
		if err != nil || v.AccessKeyID == "" || v.SignerType.IsAnonymous() {
			continue
		}
		c.current = s
		return v, nil
	}
	c.current = nil
	return credentials.Value{SignerType: credentials.SignatureAnonymous}, nil
}

func (c *chain) Retrieve() (credentials.Value, error) { return c.RetrieveWithCredContext(nil) }

func (c *chain) IsExpired() bool { return c.current == nil || c.current.IsExpired() }
