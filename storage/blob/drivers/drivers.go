// Package drivers builds the gocloud URL mux that storage/blob opens URLs
// through, with the file, mem, s3, gs and azblob drivers registered
// explicitly on a mux the caller owns.
//
//	mux := drivers.NewURLMux(nil)
//	b, err := blob.Open(ctx, mux, "gs://my-bucket?prefix=backups/", nil)
//
// Importing this package links the five gocloud drivers and their cloud SDKs
// into the program. Each of those driver packages also registers itself on
// gocloud's global blob.DefaultURLMux in its own init; that side effect comes
// with the import and is the reason the core package storage/blob does not
// import them. NewURLMux does not touch the global mux beyond asking it for
// the azblob opener, whose credential discovery is not exported.
//
// The URLs are gocloud's, described by each driver's URLOpener:
//
//	file:///abs/dir?create_dir=1&metadata=skip
//	mem://
//	s3://bucket?region=us-east-1&endpoint=http://127.0.0.1:9000&use_path_style=true
//	gs://bucket
//	azblob://container
//
// Every scheme takes prefix=... to confine the bucket to a key prefix. The
// s3, gs and azblob drivers take the bucket from the URL's host and ignore
// its path; these openers refuse a path instead, so that "s3://b/backups"
// does not quietly write to the top of the bucket. Credentials come from
// each SDK's default chain (environment, shared files, instance roles), or
// from an opener the host passes in Options.
package drivers

import (
	"context"
	"net/url"

	gcblob "gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/blob/s3blob"

	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/blob/azure"
	"github.com/etcdbackup/etcdbackup/storage/blob/gcs"
)

// Options replaces the opener of a scheme. A nil *Options, and each nil
// field, mean the default opener for that scheme.
type Options struct {
	// File opens file:// URLs. The default is a fileblob.URLOpener with
	// Options.NoTempDir set: fileblob then writes its temporary files next
	// to the object and renames them in place, which works when the
	// directory is on another file system than os.TempDir (a mounted
	// volume), where the rename from os.TempDir would fail. storage/blob
	// hides those files from List.
	File gcblob.BucketURLOpener

	// Mem opens mem:// URLs; each URL opened is a new, empty bucket. The
	// default is a memblob.URLOpener.
	Mem gcblob.BucketURLOpener

	// S3 opens s3:// URLs. The default is an s3blob.URLOpener, used
	// afresh for each URL since it keeps per-URL options in itself, with
	// the AWS SDK's default configuration and credential chain.
	S3 gcblob.BucketURLOpener

	// GCS opens gs:// URLs. The default is a gcsblob.URLOpener with the
	// Application Default Credentials found when the URL is opened; without
	// any, the open fails (gocloud's own default prints a warning to stdout
	// and goes on unauthenticated). It needs none for an emulator named by
	// STORAGE_EMULATOR_HOST or a URL with anonymous=true. Signed URLs and
	// other universe domains need an opener of the host's.
	GCS gcblob.BucketURLOpener

	// Azure opens azblob:// URLs. The default is azure.URLOpener():
	// azureblob's, configured from the AZURE_STORAGE_* environment
	// variables, which refuses a URL that disagrees with the environment's
	// connection string.
	Azure gcblob.BucketURLOpener
}

// NewURLMux returns a new mux with the file, mem, s3, gs and azblob schemes
// registered.
func NewURLMux(opts *Options) *gcblob.URLMux {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.File == nil {
		o.File = &fileblob.URLOpener{Options: fileblob.Options{NoTempDir: true}}
	}
	if o.Mem == nil {
		o.Mem = &memblob.URLOpener{}
	}
	if o.S3 == nil {
		o.S3 = openerFunc(func(ctx context.Context, u *url.URL) (*gcblob.Bucket, error) {
			return new(s3blob.URLOpener).OpenBucketURL(ctx, u)
		})
	}
	if o.GCS == nil {
		o.GCS = gcs.URLOpener()
	}
	if o.Azure == nil {
		o.Azure = azure.URLOpener()
	}
	mux := new(gcblob.URLMux)
	mux.RegisterBucket(fileblob.Scheme, o.File)
	mux.RegisterBucket(memblob.Scheme, o.Mem)
	mux.RegisterBucket(s3blob.Scheme, blob.HostOnly(o.S3))
	mux.RegisterBucket(gcs.Scheme, blob.HostOnly(o.GCS))
	mux.RegisterBucket(azure.Scheme, blob.HostOnly(o.Azure))
	return mux
}

type openerFunc func(ctx context.Context, u *url.URL) (*gcblob.Bucket, error)

func (f openerFunc) OpenBucketURL(ctx context.Context, u *url.URL) (*gcblob.Bucket, error) {
	return f(ctx, u)
}
