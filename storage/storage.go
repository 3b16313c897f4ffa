package storage

import (
	"context"
	"io"
	"iter"
	"time"
)

// Bucket is a flat namespace of objects addressed by key. Every backend in
// this module implements it, and every backend passes the conformance suite
// in package storagetest.
//
// Keys are slash-separated UTF-8 strings (see ValidateKey). A Bucket holds
// no notion of directories: List returns every key that starts with the
// prefix, in ascending byte order.
//
// A Bucket is safe for concurrent use by several goroutines.
type Bucket interface {
	// Put streams r to key. The length of r need not be known. The object
	// becomes visible only if Put returns nil: when r returns an error or ctx
	// is cancelled, nothing is left under key (an existing object under key
	// is left as it was) and the backend cleans up what it uploaded.
	Put(ctx context.Context, key string, r io.Reader, opts *PutOptions) error

	// Get opens the object for reading. The caller closes the reader.
	// A missing key yields an error matching ErrNotFound.
	Get(ctx context.Context, key string) (io.ReadCloser, error)

	// Stat describes the object. A missing key yields ErrNotFound.
	Stat(ctx context.Context, key string) (ObjectInfo, error)

	// List yields every object whose key starts with prefix, in ascending
	// byte order of keys, fetching further pages as the caller iterates.
	// An error ends the sequence: it is yielded once with a zero ObjectInfo.
	List(ctx context.Context, prefix string) iter.Seq2[ObjectInfo, error]

	// Delete removes the object. Deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	// Key is the object's full key within the bucket.
	Key string
	// Size is the object's length in bytes.
	Size int64
	// ModTime is when the backend last wrote the object. Backups are ordered
	// by the creation time in their manifest, never by ModTime alone.
	ModTime time.Time
	// ETag is the backend's opaque version tag; it may be empty.
	ETag string
	// Metadata is the user metadata stored with the object (see
	// PutOptions.Metadata). Stat fills it on backends that keep metadata;
	// List leaves it nil, since listings do not carry it everywhere.
	Metadata map[string]string
}

// PutOptions tunes a Put. A nil *PutOptions means the defaults.
type PutOptions struct {
	// ContentType is stored with the object if the backend keeps it.
	// Empty means "application/octet-stream".
	ContentType string
	// Metadata is stored as user metadata if the backend keeps it. Keys are
	// lowercase ASCII; values must not carry secrets, since stores show them
	// to anyone who may read the object.
	Metadata map[string]string
}

// ContentTypeOrDefault returns o.ContentType, or "application/octet-stream"
// when o is nil or the field is empty.
func (o *PutOptions) ContentTypeOrDefault() string {
	if o == nil || o.ContentType == "" {
		return "application/octet-stream"
	}
	return o.ContentType
}

// MetadataOrNil returns o.Metadata, or nil when o is nil.
func (o *PutOptions) MetadataOrNil() map[string]string {
	if o == nil {
		return nil
	}
	return o.Metadata
}
