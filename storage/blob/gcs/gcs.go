// Package gcs is the gs:// driver of storage/blob: Google Cloud Storage
// through gocloud's gcsblob. Importing it links the Google Cloud SDK;
// a program that does not import it links none of it. It registers
// nothing on import: a host passes Driver() where it wants gs://
// destinations (destination.Options.Drivers).
package gcs

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	gcblob "gocloud.dev/blob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/gcp"
	"golang.org/x/oauth2/google"
	"google.golang.org/api/option"

	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
)

// Scheme is the URL scheme of the driver.
const Scheme = gcsblob.Scheme

// scope is the OAuth scope a service account's key is used with.
const scope = "https://www.googleapis.com/auth/devstorage.read_write"

// Driver returns the gs:// driver.
func Driver() blob.Driver {
	return blob.Driver{Scheme: Scheme, URLOpener: URLOpener(), OpenKey: openKey}
}

// URLOpener opens gs:// URLs with the Application Default Credentials of
// the moment; without any the open fails with storage.ErrPermission
// (gocloud's own default prints a warning and goes on unauthenticated). It
// needs none for an emulator named by STORAGE_EMULATOR_HOST or a URL with
// anonymous=true. An endpoint parameter (http(s)://HOST[:PORT]) points it
// at another Cloud Storage API and needs anonymous=true.
func URLOpener() gcblob.BucketURLOpener { return blob.HostOnly(adcOpener{}) }

type adcOpener struct{}

func (adcOpener) OpenBucketURL(ctx context.Context, u *url.URL) (*gcblob.Bucket, error) {
	anonymous, _ := strconv.ParseBool(u.Query().Get("anonymous"))
	if u.Query().Has("endpoint") {
		return openEndpoint(ctx, u, anonymous)
	}
	if anonymous || os.Getenv("STORAGE_EMULATOR_HOST") != "" {
		opener := &gcsblob.URLOpener{Client: gcp.NewAnonymousHTTPClient(gcp.DefaultTransport())}
		return opener.OpenBucketURL(ctx, u)
	}
	creds, err := gcp.DefaultCredentials(ctx)
	if err != nil {
		// Missing credentials are an auth failure: hosts classify it so.
		return nil, fmt.Errorf("gs://%s: %w: no Google Application Default Credentials: %w", u.Host, storage.ErrPermission, err)
	}
	client, err := gcp.NewHTTPClient(gcp.DefaultTransport(), creds.TokenSource)
	if err != nil {
		return nil, fmt.Errorf("gs://%s: %w", u.Host, err)
	}
	opener := &gcsblob.URLOpener{Client: client, TokenSource: gcp.CredentialsTokenSource(creds)}
	return opener.OpenBucketURL(ctx, u)
}

// openEndpoint opens a gs:// URL whose endpoint parameter names a Cloud
// Storage API other than Google's (a private one, an emulator) as
// http(s)://HOST[:PORT]. Such a URL must also say anonymous=true: the
// process's Google credentials are never sent to an endpoint a URL chose.
func openEndpoint(ctx context.Context, u *url.URL, anonymous bool) (*gcblob.Bucket, error) {
	q := u.Query()
	ep, err := url.Parse(q.Get("endpoint"))
	switch {
	case err != nil || (ep.Scheme != "http" && ep.Scheme != "https") || ep.Host == "" || strings.Trim(ep.Path, "/") != "" || ep.User != nil:
		return nil, fmt.Errorf("gs://%s: the endpoint parameter is not http(s)://HOST[:PORT]", u.Host)
	case !anonymous:
		return nil, fmt.Errorf("gs://%s: %w: an endpoint other than Google's needs anonymous=true: the process's Google credentials are not sent to it", u.Host, storage.ErrPermission)
	}
	q.Del("endpoint")
	q.Del("anonymous")
	if len(q) > 0 {
		return nil, fmt.Errorf("gs://%s: with an endpoint, no other query parameter is taken", u.Host)
	}
	client := gcp.NewAnonymousHTTPClient(gcp.DefaultTransport())
	return gcsblob.OpenBucket(ctx, client, u.Host, &gcsblob.Options{ClientOptions: []option.ClientOption{
		option.WithEndpoint(ep.Scheme + "://" + ep.Host + "/storage/v1/"), option.WithoutAuthentication()}})
}

// openKey opens k.Bucket with the service account whose JSON key is
// k.SecretAccessKey.
func openKey(ctx context.Context, k blob.Key) (*blob.Bucket, func(), error) {
	if k.SecretAccessKey == "" {
		return nil, nil, fmt.Errorf("%w: no service account key", blob.ErrBadKey)
	}
	gc, err := google.CredentialsFromJSONWithType(ctx, []byte(k.SecretAccessKey), google.ServiceAccount, scope)
	if err != nil {
		// The parser's message may quote the key's text.
		return nil, nil, fmt.Errorf("%w: the secret key is no service account JSON key", blob.ErrBadKey)
	}
	client, err := gcp.NewHTTPClient(gcp.DefaultTransport(), gc.TokenSource)
	if err != nil {
		return nil, nil, fmt.Errorf("gs://%s: %w", k.Bucket, err)
	}
	var opts *gcsblob.Options
	if k.Endpoint != "" {
		scheme := "https"
		if k.Insecure {
			scheme = "http"
		}
		opts = &gcsblob.Options{ClientOptions: []option.ClientOption{option.WithEndpoint(scheme + "://" + k.Endpoint + "/storage/v1/")}}
	}
	gb, err := gcsblob.OpenBucket(ctx, client, k.Bucket, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("gs://%s: %w", k.Bucket, err)
	}
	return blob.New(gb, &blob.Options{Logger: k.Logger}), func() { _ = gb.Close() }, nil
}
