package destination

import (
	"context"
	"fmt"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/gcp"
	"golang.org/x/oauth2/google"
	"google.golang.org/api/option"

	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// gcsScope is the OAuth scope a gs:// destination's key is used with.
const gcsScope = "https://www.googleapis.com/auth/devstorage.read_write"

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

// openGCS opens a gs:// destination with the service-account key its
// credentials resolve to, read once: an Update reopens it with the key of
// the moment. Errors about the key match ErrCredentials and never repeat
// it.
func (r *Registry) openGCS(ctx context.Context, spec Spec, loc Location) (*blob.Bucket, func(), error) {
	creds, err := spec.Credentials.resolve(ctx, spec.Name, r.opts.Secrets)
	if err != nil {
		return nil, nil, err
	}
	v, err := creds.GetWithContext(&credentials.CredContext{})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrCredentials, err)
	}
	if v.SecretAccessKey == "" {
		return nil, nil, fmt.Errorf("%w: no service account key", ErrCredentials)
	}
	gc, err := google.CredentialsFromJSONWithType(ctx, []byte(v.SecretAccessKey), google.ServiceAccount, gcsScope)
	if err != nil {
		// The parser's message may quote the key's text.
		return nil, nil, fmt.Errorf("%w: the secret key is no service account JSON key", ErrCredentials)
	}
	client, err := gcp.NewHTTPClient(gcp.DefaultTransport(), gc.TokenSource)
	if err != nil {
		return nil, nil, fmt.Errorf("gs://%s: %w", loc.Bucket, err)
	}
	var opts *gcsblob.Options
	if loc.Endpoint != "" {
		scheme := "https"
		if loc.Insecure {
			scheme = "http"
		}
		opts = &gcsblob.Options{ClientOptions: []option.ClientOption{option.WithEndpoint(scheme + "://" + loc.Endpoint + "/storage/v1/")}}
	}
	gb, err := gcsblob.OpenBucket(ctx, client, loc.Bucket, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("gs://%s: %w", loc.Bucket, err)
	}
	b := blob.New(gb, &blob.Options{Logger: r.log.With("destination", spec.Name)})
	return b, func() { _ = gb.Close() }, nil
}
