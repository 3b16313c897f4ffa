package blob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	gcblob "gocloud.dev/blob"
)

// Driver opens the buckets of one cloud scheme whose SDK a program links
// only when it asks for it: package storage/blob/gcs gives the gs://
// driver and package storage/blob/azure the azblob:// one. A host passes
// the drivers it uses to destination.Options.Drivers, or registers their
// URLOpener on a mux of its own. Nothing registers itself on import.
type Driver struct {
	// Scheme is the URL scheme the driver opens: "gs" or "azblob".
	Scheme string
	// URLOpener opens gocloud URLs of the scheme with the SDK's own
	// credential discovery (Application Default Credentials, the
	// AZURE_STORAGE_* variables). It refuses a URL with a path: the cloud
	// drivers take the bucket from the host and would ignore it.
	URLOpener gcblob.BucketURLOpener
	// OpenKey opens a bucket with credentials given rather than found,
	// read once. The returned function releases what the bucket holds
	// beyond Close (a transport of its own). Errors about the key match
	// ErrBadKey and never repeat it.
	OpenKey func(ctx context.Context, k Key) (*Bucket, func(), error)
	// ErrorCode goes to the Options.ErrorCode of the buckets opened
	// through URLOpener; nil for a driver whose errors gocloud classifies
	// itself.
	ErrorCode func(err error) (status int, code string, ok bool)
}

// Key is where a Driver opens a bucket with given credentials, and those
// credentials.
type Key struct {
	// Bucket is the bucket, or Azure container.
	Bucket string
	// Endpoint is the service's host[:port]; empty means the cloud's own.
	// For azblob it is the storage domain the account's host is under.
	Endpoint string
	// Insecure talks plain HTTP to Endpoint (an emulator).
	Insecure bool
	// Account is the Azure storage account; empty means AccessKeyID.
	Account string
	// AccessKeyID and SecretAccessKey are the credentials: for gs the
	// secret is a service account's JSON key; for azblob the access key
	// is the storage account's name and the secret its shared key.
	AccessKeyID, SecretAccessKey string
	// Logger is given to the Bucket; nil means silent.
	Logger *slog.Logger
}

// ErrBadKey matches a Driver's refusal of the credentials it was given:
// missing, or not of the form its service takes.
var ErrBadKey = errors.New("unusable key")

// HostOnly wraps an opener of a cloud scheme so that it refuses URLs with
// a path, which the cloud drivers ignore: "gs://b/backups" must not write
// to the top of the bucket.
func HostOnly(next gcblob.BucketURLOpener) gcblob.BucketURLOpener {
	return hostOnly{next}
}

type hostOnly struct {
	next gcblob.BucketURLOpener
}

func (h hostOnly) OpenBucketURL(ctx context.Context, u *url.URL) (*gcblob.Bucket, error) {
	if p := strings.Trim(u.Path, "/"); p != "" {
		return nil, fmt.Errorf("%s:// URLs name the bucket by host only and the driver would ignore the path %q: use the prefix parameter", u.Scheme, p)
	}
	return h.next.OpenBucketURL(ctx, u)
}
