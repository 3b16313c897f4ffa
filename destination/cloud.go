package destination

import (
	"context"
	"errors"
	"fmt"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// driverPackages names the package of each cloud scheme's driver, for the
// error that asks a host to add it.
var driverPackages = map[string]string{
	SchemeGCS:   "github.com/etcdbackup/etcdbackup/storage/blob/gcs",
	SchemeAzure: "github.com/etcdbackup/etcdbackup/storage/blob/azure",
}

// gcsKeySource reports whether c is a source a gs:// destination takes its
// service account's JSON key from: a secret (its secret key holds the
// JSON), a file or an environment variable.
func gcsKeySource(c Credentials) bool {
	switch c.Source {
	case SourceSecret, SourceFiles, SourceEnv:
		return true
	}
	return false
}

// azureKeySource reports whether c is a source an azblob:// destination
// takes a shared key from: the storage account's name as the access key
// and its key as the secret key.
func azureKeySource(c Credentials) bool {
	switch c.Source {
	case SourceSecret, SourceFiles:
		return true
	case SourceEnv:
		return c.AccessKeyEnv != "" // the AWS_* names mean nothing to Azure
	}
	return false
}

// driver returns the registry's driver of a cloud scheme.
func (r *Registry) driver(scheme string) (blob.Driver, bool) {
	for _, d := range r.opts.Drivers {
		if d.Scheme == scheme {
			return d, true
		}
	}
	return blob.Driver{}, false
}

// checkDriver reports a cloud destination the registry cannot open: its
// scheme's driver was not given (Options.Drivers), and no host mux opens
// it either (a destination with credentials always needs the driver).
func (r *Registry) checkDriver(spec Spec, loc Location) error {
	pkg, cloud := driverPackages[loc.Scheme]
	if !cloud {
		return nil
	}
	if _, ok := r.driver(loc.Scheme); ok {
		return nil
	}
	if spec.Credentials == (Credentials{}) && r.opts.Mux != nil && r.opts.Mux.ValidBucketScheme(loc.Scheme) {
		return nil
	}
	return fmt.Errorf("%w: %s:// destinations need the driver of package %s: pass its Driver() in destination.Options.Drivers",
		ErrNoDriver, loc.Scheme, pkg)
}

// openKey opens a gs:// or azblob:// destination with the key its
// credentials resolve to, read once: an Update reopens it with the key of
// the moment. Errors about the key match ErrCredentials and never repeat
// it.
func (r *Registry) openKey(ctx context.Context, spec Spec, loc Location) (*blob.Bucket, func(), error) {
	d, ok := r.driver(loc.Scheme)
	if !ok {
		return nil, nil, r.checkDriver(spec, loc)
	}
	creds, err := spec.Credentials.resolve(ctx, spec.Name, r.opts.Secrets, r.opts.CredentialSources)
	if err != nil {
		return nil, nil, err
	}
	v, err := creds.GetWithContext(&credentials.CredContext{})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrCredentials, err)
	}
	b, closer, err := d.OpenKey(ctx, blob.Key{
		Bucket: loc.Bucket, Endpoint: loc.Endpoint, Insecure: loc.Insecure, Account: loc.Account,
		AccessKeyID: v.AccessKeyID, SecretAccessKey: v.SecretAccessKey, Logger: r.log.With("destination", spec.Name),
	})
	if errors.Is(err, blob.ErrBadKey) {
		return nil, nil, fmt.Errorf("%w: %w", ErrCredentials, err)
	}
	return b, closer, err
}
