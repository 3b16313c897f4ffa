package destination

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"gopkg.in/ini.v1"

	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// CredentialsSource says where a destination's S3 credentials (or an
// azblob:// destination's shared key) come from.
type CredentialsSource string

// The credentials sources.
const (
	// SourceDefault, the zero value, is the S3 default chain: the AWS_*
	// (or MINIO_*) environment variables, then ~/.aws/credentials, then the
	// IAM role of the process.
	SourceDefault CredentialsSource = ""
	// SourceSecret asks the registry's SecretResolver for the credentials
	// named by Credentials.Secret: a Kubernetes Secret in a
	// controller-manager.
	SourceSecret CredentialsSource = "secret"
	// SourceFiles reads the keys from files, as a mounted Secret holds
	// them. The files are read again every minute, so a rotated Secret is
	// picked up without an update.
	SourceFiles CredentialsSource = "files"
	// SourceEnv reads the keys from environment variables, named by the
	// Credentials' *Env fields or, when those are empty, the standard
	// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.
	SourceEnv CredentialsSource = "env"
	// SourceIAM uses the role the process runs as: a web identity token
	// (EKS IRSA), the ECS task role or the EC2 instance profile.
	SourceIAM CredentialsSource = "iam"
	// SourceAnonymous sends unsigned requests, for public buckets.
	SourceAnonymous CredentialsSource = "anonymous"
	// SourceAWSFiles reads an AWS shared credentials file and config file
	// pair, as the AWS CLI writes them (~/.aws/credentials and
	// ~/.aws/config), for the profile Profile ("default" when empty): the
	// keys from the credentials file, or else from the config file, and
	// the region from the config file when the destination names none.
	SourceAWSFiles CredentialsSource = "aws-files"
)

// FileRefresh is how long keys read by SourceFiles are used before the
// files are read again.
const FileRefresh = time.Minute

// Credentials is a destination's reference to its S3 credentials: where
// they are, never what they are, so a Spec can be logged and stored. The
// zero value means SourceDefault. Fields that do not belong to the Source
// must be empty.
type Credentials struct {
	// Source selects where the credentials come from.
	Source CredentialsSource

	// Secret names the credentials for SourceSecret, in the host's terms
	// (for instance "namespace/name" of a Kubernetes Secret).
	Secret string

	// AccessKeyFile and SecretKeyFile name the files holding the keys for
	// SourceFiles; both are required. SessionTokenFile is optional.
	// Surrounding whitespace in the files is ignored.
	AccessKeyFile, SecretKeyFile, SessionTokenFile string

	// AccessKeyEnv and SecretKeyEnv name the variables holding the keys
	// for SourceEnv: both or neither (neither means the standard AWS
	// names). SessionTokenEnv is optional.
	AccessKeyEnv, SecretKeyEnv, SessionTokenEnv string

	// IAMEndpoint overrides the metadata endpoint for SourceIAM. Empty
	// means the standard ones.
	IAMEndpoint string
	// AWSCredentialsFile and AWSConfigFile name the shared files for
	// SourceAWSFiles, at least one of them; Profile picks the profile in
	// them, "default" when empty.
	AWSCredentialsFile, AWSConfigFile, Profile string

	// Revision is an opaque version of the credentials' content, such as
	// the resourceVersion of the Secret. It is not used to find them; a
	// change of it makes Registry.Apply swap the destination's client, so
	// a host rotates credentials by applying the new revision.
	Revision string
}

// Validate checks that the fields fit the source.
func (c Credentials) Validate() error {
	var unexpected []string
	check := func(set bool, name string) {
		if set {
			unexpected = append(unexpected, name)
		}
	}
	files := c.AccessKeyFile != "" || c.SecretKeyFile != "" || c.SessionTokenFile != ""
	env := c.AccessKeyEnv != "" || c.SecretKeyEnv != "" || c.SessionTokenEnv != ""
	switch c.Source {
	case SourceDefault, SourceAnonymous, SourceIAM, SourceSecret, SourceFiles, SourceEnv, SourceAWSFiles:
	default:
		return fmt.Errorf("unknown source %q (want secret, files, env, iam, aws-files, anonymous or empty for the default chain)", c.Source)
	}
	check(c.Source != SourceSecret && c.Secret != "", "secret")
	check(c.Source != SourceFiles && files, "key files")
	check(c.Source != SourceEnv && env, "environment variable names")
	check(c.Source != SourceIAM && c.IAMEndpoint != "", "IAM endpoint")
	check(c.Source != SourceAWSFiles && (c.AWSCredentialsFile != "" || c.AWSConfigFile != "" || c.Profile != ""), "AWS shared files")
	if len(unexpected) > 0 {
		return fmt.Errorf("source %q takes no %s", sourceName(c.Source), strings.Join(unexpected, ", "))
	}
	switch c.Source {
	case SourceAWSFiles:
		if c.AWSCredentialsFile == "" && c.AWSConfigFile == "" {
			return errors.New("source aws-files needs a shared credentials file, a config file or both")
		}
	case SourceSecret:
		if c.Secret == "" {
			return errors.New("source secret needs the secret's name")
		}
	case SourceFiles:
		// gs:// destinations take the secret key file alone (a service
		// account's JSON key); Spec.Validate asks the others for both.
		if c.SecretKeyFile == "" {
			return errors.New("source files needs a secret key file")
		}
	case SourceEnv:
		if c.AccessKeyEnv != "" && c.SecretKeyEnv == "" {
			return errors.New("source env needs the secret key variable with the access key variable")
		}
		if c.SessionTokenEnv != "" && c.AccessKeyEnv == "" {
			return errors.New("source env with a session token variable needs the key variables too")
		}
	}
	return nil
}

func sourceName(s CredentialsSource) string {
	if s == SourceDefault {
		return "default"
	}
	return string(s)
}

// SecretResolver looks up the credentials a host keeps for a destination:
// in a controller-manager, a Kubernetes Secret. The registry calls it when
// it opens a destination whose Credentials.Source is SourceSecret: when the
// destination is added or updated, and at availability checks while it
// could not be opened. destination is the destination's name, for hosts
// that keep the keys of several destinations in one secret under prefixed
// keys.
//
// Errors must not contain the credentials; they become part of the
// destination's status.
type SecretResolver interface {
	ResolveSecret(ctx context.Context, destination, secret string) (*credentials.Credentials, error)
}

// SecretResolverFunc adapts a function to a SecretResolver.
type SecretResolverFunc func(ctx context.Context, destination, secret string) (*credentials.Credentials, error)

// ResolveSecret calls f.
func (f SecretResolverFunc) ResolveSecret(ctx context.Context, destination, secret string) (*credentials.Credentials, error) {
	return f(ctx, destination, secret)
}

// Keys are S3 keys. Their String, GoString and LogValue hide them, so a
// Keys value may be printed or logged by mistake without leaking.
type Keys struct {
	AccessKey    string
	SecretKey    string
	SessionToken string
}

// Credentials returns static credentials with the keys.
func (k Keys) Credentials() *credentials.Credentials {
	return s3.StaticCredentials(k.AccessKey, k.SecretKey, k.SessionToken)
}

// String hides the keys.
func (k Keys) String() string { return "destination.Keys{<redacted>}" }

// GoString hides the keys.
func (k Keys) GoString() string { return k.String() }

// LogValue hides the keys.
func (k Keys) LogValue() slog.Value { return slog.StringValue(k.String()) }

// StaticSecrets is a SecretResolver that serves fixed keys by secret name,
// for hosts that hold the keys themselves and for tests. Rotate by updating
// the map (before Registry.Update or Apply; the map is not synchronised)
// or by passing a new one.
type StaticSecrets map[string]Keys

// ResolveSecret implements SecretResolver.
func (s StaticSecrets) ResolveSecret(_ context.Context, _, secret string) (*credentials.Credentials, error) {
	k, ok := s[secret]
	if !ok {
		return nil, fmt.Errorf("no secret %s", quote(secret))
	}
	return k.Credentials(), nil
}

// resolve returns the credentials c refers to. Key files are checked
// against sources again at every read, so that a symbolic link changed
// since the spec was validated cannot lead elsewhere. Errors match
// ErrCredentials.
func (c Credentials) resolve(ctx context.Context, destination string, secrets SecretResolver, sources CredentialSources) (*credentials.Credentials, error) {
	switch c.Source {
	case SourceSecret:
		if secrets == nil {
			return nil, fmt.Errorf("%w: no secret resolver to look up secret %s", ErrCredentials, quote(c.Secret))
		}
		creds, err := secrets.ResolveSecret(ctx, destination, c.Secret)
		if err != nil {
			return nil, fmt.Errorf("%w: secret %s: %w", ErrCredentials, quote(c.Secret), err)
		}
		if creds == nil {
			return nil, fmt.Errorf("%w: secret %s: resolver returned no credentials", ErrCredentials, quote(c.Secret))
		}
		return creds, nil
	case SourceFiles:
		return credentials.New(&fileProvider{access: c.AccessKeyFile, secret: c.SecretKeyFile, token: c.SessionTokenFile,
			dirs: sources.Dirs, checkDirs: true}), nil
	case SourceEnv:
		if c.SecretKeyEnv == "" {
			return s3.EnvCredentials(), nil
		}
		return credentials.New(&envProvider{access: c.AccessKeyEnv, secret: c.SecretKeyEnv, token: c.SessionTokenEnv}), nil
	case SourceIAM:
		return s3.IAMCredentials(c.IAMEndpoint), nil
	case SourceAWSFiles:
		var chain []credentials.Provider
		var files []string
		for _, f := range []string{c.AWSCredentialsFile, c.AWSConfigFile} {
			if f != "" {
				chain = append(chain, &credentials.FileAWSCredentials{Filename: f, Profile: c.profile()})
				files = append(files, f)
			}
		}
		return credentials.New(&checkedFiles{Provider: &credentials.Chain{Providers: chain}, files: files, dirs: sources.Dirs}), nil
	case SourceAnonymous:
		return credentials.New(&credentials.Static{Value: credentials.Value{SignerType: credentials.SignatureAnonymous}}), nil
	default:
		return s3.DefaultCredentials(), nil
	}
}

// fileProvider reads keys from files, again after FileRefresh.
type fileProvider struct {
	access, secret, token string
	dirs                  []string // the directories the files must be in
	checkDirs             bool

	mu   sync.Mutex
	read time.Time
}

func (p *fileProvider) RetrieveWithCredContext(*credentials.CredContext) (credentials.Value, error) {
	v := credentials.Value{SignerType: credentials.SignatureV4}
	if p.checkDirs {
		for _, f := range []string{p.access, p.secret, p.token} {
			if f == "" {
				continue
			}
			if err := inDirs(f, p.dirs); err != nil {
				return credentials.Value{}, fmt.Errorf("%w: key file %s: %w", ErrCredentials, quote(f), err)
			}
		}
	}
	var err error
	if p.access != "" {
		if v.AccessKeyID, err = readKeyFile("access key", p.access); err != nil {
			return credentials.Value{}, err
		}
	}
	if v.SecretAccessKey, err = readKeyFile("secret key", p.secret); err != nil {
		return credentials.Value{}, err
	}
	if p.token != "" {
		if v.SessionToken, err = readKeyFile("session token", p.token); err != nil {
			return credentials.Value{}, err
		}
	}
	p.mu.Lock()
	p.read = time.Now()
	p.mu.Unlock()
	return v, nil
}

func (p *fileProvider) Retrieve() (credentials.Value, error) { return p.RetrieveWithCredContext(nil) }

func (p *fileProvider) IsExpired() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.read.IsZero() || time.Since(p.read) > FileRefresh
}

// checkedFiles checks that the AWS shared files lie in the allowed
// directories before every read, as fileProvider does for key files: a
// symbolic link turned elsewhere since the spec was validated must not
// lead to another file, nor to the credential_process another file names.
// A refused file fails the retrieval; a chain alone would go on to
// anonymous access without a word.
type checkedFiles struct {
	credentials.Provider
	files, dirs []string
}

func (p *checkedFiles) RetrieveWithCredContext(cc *credentials.CredContext) (credentials.Value, error) {
	for _, f := range p.files {
		if err := inDirs(f, p.dirs); err != nil {
			return credentials.Value{}, fmt.Errorf("%w: AWS shared file %s: %w", ErrCredentials, quote(f), err)
		}
	}
	return p.Provider.RetrieveWithCredContext(cc)
}

func (p *checkedFiles) Retrieve() (credentials.Value, error) { return p.RetrieveWithCredContext(nil) }

// readKeyFile reads one key. Its errors name the file, never its content.
func readKeyFile(what, name string) (string, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", fmt.Errorf("%w: read %s file %s: %w", ErrCredentials, what, quote(name), err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%w: %s file %s is empty", ErrCredentials, what, quote(name))
	}
	return v, nil
}

// envProvider reads keys from named environment variables at every
// retrieval.
type envProvider struct {
	access, secret, token string
}

func (p *envProvider) RetrieveWithCredContext(*credentials.CredContext) (credentials.Value, error) {
	v := credentials.Value{
		SecretAccessKey: os.Getenv(p.secret),
		SignerType:      credentials.SignatureV4,
	}
	if p.access != "" {
		v.AccessKeyID = os.Getenv(p.access)
	}
	if p.token != "" {
		v.SessionToken = os.Getenv(p.token)
	}
	switch {
	case p.access != "" && v.AccessKeyID == "":
		return credentials.Value{}, fmt.Errorf("%w: environment variable %s is empty", ErrCredentials, p.access)
	case v.SecretAccessKey == "":
		return credentials.Value{}, fmt.Errorf("%w: environment variable %s is empty", ErrCredentials, p.secret)
	}
	return v, nil
}

func (p *envProvider) Retrieve() (credentials.Value, error) { return p.RetrieveWithCredContext(nil) }

// IsExpired is always true: reading the environment costs nothing, and so
// a changed variable is used at once.
func (p *envProvider) IsExpired() bool { return true }

// validateFor checks what only a kind of destination asks of its
// credentials: S3 and Azure keys come in pairs, a gs:// destination's
// service-account key comes alone.
func (c Credentials) validateFor(scheme string) error {
	switch scheme {
	case SchemeS3, SchemeAzure:
		if c.Source == SourceFiles && c.AccessKeyFile == "" {
			return errors.New("source files needs an access key file and a secret key file")
		}
		if c.Source == SourceEnv && c.SecretKeyEnv != "" && c.AccessKeyEnv == "" {
			return errors.New("source env needs both variable names or neither")
		}
	case SchemeGCS:
		if c.AccessKeyFile != "" || c.AccessKeyEnv != "" || c.SessionTokenFile != "" || c.SessionTokenEnv != "" {
			return errors.New("a gs:// destination takes a service account's JSON key alone: the secret key file, the secret key variable, or a secret's secret key")
		}
		if c.Source == SourceEnv && c.SecretKeyEnv == "" {
			return errors.New("source env of a gs:// destination needs the name of the variable holding the JSON key")
		}
	}
	return nil
}

func (c Credentials) profile() string {
	if c.Profile == "" {
		return "default"
	}
	return c.Profile
}

// awsRegion returns the region of the profile in the AWS config file of
// SourceAWSFiles credentials, or "". The file is checked against sources
// first, as at every read.
func (c Credentials) awsRegion(sources CredentialSources) (string, error) {
	if c.Source != SourceAWSFiles || c.AWSConfigFile == "" {
		return "", nil
	}
	if err := inDirs(c.AWSConfigFile, sources.Dirs); err != nil {
		return "", fmt.Errorf("%w: aws config file %s: %w", ErrCredentials, quote(c.AWSConfigFile), err)
	}
	f, err := ini.Load(c.AWSConfigFile)
	if err != nil {
		// ini's errors may quote a line of the file: a key.
		return "", fmt.Errorf("%w: aws config file %s cannot be read", ErrCredentials, c.AWSConfigFile)
	}
	for _, name := range []string{"profile " + c.profile(), c.profile()} {
		if sec, err := f.GetSection(name); err == nil {
			return sec.Key("region").String(), nil
		}
	}
	return "", nil
}
