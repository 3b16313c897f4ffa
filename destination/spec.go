package destination

import (
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// Spec is the configuration of one named destination: what a host keeps in
// its own configuration (a Seed object's list of backup destinations) and
// hands to the Registry. It holds no secret: Credentials only says where
// they are. The zero value of every optional field is documented.
//
// The location is given either as URL or, in the shape of the
// configurations that predate URLs, as the S3 fields Endpoint, Bucket,
// Prefix and Region; never both.
type Spec struct {
	// Name identifies the destination: a DNS label (see
	// backup.ValidateName). It is recorded in every backup's manifest, so
	// it never changes.
	Name string

	// URL locates the destination; see ParseURL for the forms. Empty means
	// the S3 fields below.
	URL string

	// Endpoint is the S3 endpoint: host[:port], or http://host[:port] for
	// plain HTTP, or https://host[:port]. Empty means Amazon S3.
	Endpoint string
	// Bucket is the S3 bucket. It is required when URL is empty.
	Bucket string
	// Prefix confines the destination to the keys under it. Empty means
	// the whole bucket.
	Prefix string
	// Region is the bucket's region. Empty lets the client ask the store.
	Region string

	// Credentials says where the destination's S3 credentials come from.
	// The zero value means the S3 default chain. An azblob:// destination
	// takes a shared key from a secret, files or named environment
	// variables (the storage account's name as the access key, its key as
	// the secret key), read when it is opened; with the zero value it uses
	// the registry's URL mux, which reads the environment. gs://, file://
	// and mem:// destinations refuse a non-zero value.
	Credentials Credentials

	// ReadOnly makes the destination refuse writes and deletes with
	// ErrReadOnly: backups and retention leave it alone, restore and
	// inventory still read it. Use it for another seed's bucket or a
	// bucket being retired.
	ReadOnly bool

	// CheckInterval is the time between availability checks. Zero means
	// the registry's Options.CheckInterval.
	CheckInterval time.Duration

	// PollInterval is the time between inventory syncs. Zero means the
	// registry's Options.PollInterval.
	PollInterval time.Duration

	// ObjectLock, when set, locks every backup written to the destination
	// (its data object and its manifest) for a while, so that nobody can
	// delete it before. The bucket must have object lock enabled; s3 only.
	// The zero value locks nothing beyond the bucket's own defaults.
	ObjectLock ObjectLock

	// Encryption asks the store to encrypt what it stores (SSE-S3 or
	// SSE-KMS); s3 only. The zero value asks for nothing beyond the
	// bucket's default encryption.
	Encryption s3.SSE

	// CACertPEM holds PEM certificates of authorities trusted for the S3
	// endpoint's HTTPS in addition to the system's: the private CA of an
	// on-premises MinIO or Ceph gateway. s3 only; not with plain HTTP.
	CACertPEM string
	// CACertFile names a PEM file of such authorities, read each time the
	// destination is opened (by Add, and by an Update that changes how it
	// is reached). s3 only; not with plain HTTP.
	CACertFile string
}

// ObjectLock is the object lock a destination applies to the backups it
// writes. The zero value applies none.
type ObjectLock struct {
	// Mode is storage.Governance or storage.Compliance.
	Mode storage.RetentionMode
	// RetainFor is how long after writing a backup stays locked.
	RetainFor time.Duration
}

// Enabled reports whether l locks anything.
func (l ObjectLock) Enabled() bool { return l.Mode != "" }

// Validate checks that l is zero, or has a known mode and a positive
// duration.
func (l ObjectLock) Validate() error {
	if l == (ObjectLock{}) {
		return nil
	}
	switch l.Mode {
	case storage.Governance, storage.Compliance:
	default:
		return fmt.Errorf("unknown mode %q (want %s or %s)", l.Mode, storage.Governance, storage.Compliance)
	}
	if l.RetainFor <= 0 {
		return fmt.Errorf("retain duration %v is not positive", l.RetainFor)
	}
	return nil
}

// Location returns where the spec points, from its URL or its S3 fields.
// A spec with neither points nowhere yet: the zero Location, which a
// registry keeps as an Unavailable destination (ReasonNotConfigured). The
// error is a *SpecError.
func (s Spec) Location() (Location, error) { return s.location(nil) }

func (s Spec) location(custom func(scheme string) bool) (Location, error) {
	fields := s.Endpoint != "" || s.Bucket != "" || s.Prefix != "" || s.Region != ""
	specErr := func(field string, err error) error { return &SpecError{Name: s.Name, Field: field, Err: err} }
	if s.URL != "" {
		if fields {
			return Location{}, specErr("url", errors.New("give a URL or the S3 fields (endpoint, bucket, prefix, region), not both"))
		}
		loc, err := parseURL(s.URL, custom)
		if err != nil {
			return Location{}, specErr("url", err)
		}
		return loc, nil
	}
	if !fields {
		// A target whose URL is not filled in yet: kept, and reported
		// Unavailable (ReasonNotConfigured) until it is.
		return Location{}, nil
	}
	if s.Bucket == "" {
		return Location{}, specErr("bucket", errors.New("give a URL or an S3 bucket"))
	}
	loc := Location{Scheme: SchemeS3, Bucket: s.Bucket, Region: s.Region}
	if s.Endpoint != "" {
		host, scheme, err := parseEndpoint(s.Endpoint)
		if errors.Is(err, ErrCredentialsInURL) {
			return Location{}, specErr("endpoint", &URLError{Reason: "user information in an endpoint is not allowed; use the destination's credentials", Err: ErrCredentialsInURL})
		}
		if err != nil {
			return Location{}, specErr("endpoint", err)
		}
		loc.Endpoint, loc.Insecure = host, scheme == "http"
	}
	prefix, err := cleanPrefix(s.Prefix)
	if err != nil {
		return Location{}, specErr("prefix", err)
	}
	loc.Prefix = prefix
	if err := loc.Validate(); err != nil {
		return Location{}, specErr("bucket", err)
	}
	return loc, nil
}

// Validate checks the spec without I/O. It returns the first problem as a
// *SpecError, which matches ErrInvalidSpec and its cause: an invalid name
// matches backup.ErrInvalidName, a bad URL ErrInvalidURL, a URL carrying a
// credential ErrCredentialsInURL.
func (s Spec) Validate() error {
	_, err := s.validate(nil)
	return err
}

// validate checks the spec and returns its location.
func (s Spec) validate(custom func(scheme string) bool) (Location, error) {
	specErr := func(field string, err error) error { return &SpecError{Name: s.Name, Field: field, Err: err} }
	if err := backup.ValidateName("destination", s.Name); err != nil {
		return Location{}, specErr("name", err)
	}
	loc, err := s.location(custom)
	if err != nil {
		return Location{}, err
	}
	if err := s.Credentials.Validate(); err != nil {
		return Location{}, specErr("credentials", err)
	}
	if err := s.Credentials.validateFor(loc.Scheme); err != nil {
		return Location{}, specErr("credentials", err)
	}
	if s.Credentials != (Credentials{}) {
		switch {
		case loc.Scheme == SchemeGCS && gcsKeySource(s.Credentials):
		case loc.Scheme == SchemeS3:
		case loc.Scheme == SchemeAzure && !azureKeySource(s.Credentials):
			return Location{}, specErr("credentials", errors.New("azblob:// destinations take a shared key from a secret, files or named environment variables: the storage account's name as the access key, its key as the secret key"))
		case loc.Scheme != SchemeAzure && loc.Scheme != "":
			return Location{}, specErr("credentials", fmt.Errorf("%s:// destinations take no credentials of their own: the environment's, or their opener's", loc.Scheme))
		}
	}
	if s.CheckInterval < 0 {
		return Location{}, specErr("check interval", fmt.Errorf("%v is negative", s.CheckInterval))
	}
	if s.PollInterval < 0 {
		return Location{}, specErr("poll interval", fmt.Errorf("%v is negative", s.PollInterval))
	}
	if err := s.ObjectLock.Validate(); err != nil {
		return Location{}, specErr("object lock", err)
	}
	if s.ObjectLock.Enabled() && loc.Scheme != SchemeS3 {
		return Location{}, specErr("object lock", fmt.Errorf("%s:// destinations have no object lock", loc.Scheme))
	}
	if s.CACertPEM != "" || s.CACertFile != "" {
		switch {
		case loc.Scheme != SchemeS3:
			return Location{}, specErr("ca certificates", fmt.Errorf("%s:// destinations take their TLS settings from the registry's URL mux", loc.Scheme))
		case loc.Insecure:
			return Location{}, specErr("ca certificates", errors.New("given for a plain http endpoint"))
		case s.CACertPEM != "" && !x509.NewCertPool().AppendCertsFromPEM([]byte(s.CACertPEM)):
			return Location{}, specErr("ca certificates", errors.New("no certificate in the PEM data"))
		}
	}
	if s.Encryption != (s3.SSE{}) {
		if loc.Scheme != SchemeS3 {
			return Location{}, specErr("encryption", fmt.Errorf("%s:// destinations take no server-side encryption settings", loc.Scheme))
		}
		o := s3.Options{Bucket: "any-bucket", Encryption: s.Encryption}
		if err := o.Validate(); err != nil {
			return Location{}, specErr("encryption", err)
		}
	}
	return loc, nil
}

// needsReopen reports whether going from s to t changes the client: its
// location, credentials or encryption.
func (s Spec) needsReopen(t Spec) bool {
	return s.URL != t.URL || s.Endpoint != t.Endpoint || s.Bucket != t.Bucket || s.Prefix != t.Prefix ||
		s.Region != t.Region || s.Credentials != t.Credentials || s.Encryption != t.Encryption ||
		s.CACertPEM != t.CACertPEM || s.CACertFile != t.CACertFile
}
