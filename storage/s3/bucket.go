package s3

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/encrypt"

	"github.com/etcdbackup/etcdbackup/storage"
)

// Bucket is one S3 bucket seen as a storage.Bucket. It is safe for
// concurrent use.
type Bucket struct {
	core     *minio.Core
	name     string
	opts     Options // with defaults applied
	sse      encrypt.ServerSide
	log      *slog.Logger
	maxParts int              // MaxParts; lowered by tests
	onMap    func(held int64) // test hook: part-buffer bytes held after each map

	lockMu    sync.Mutex
	lockAsked time.Time // when the store last answered whether the bucket has object lock
	locking   bool      // its answer
}

// lockRecheck is how long Delete trusts the store's answer about object
// lock: a bucket may have it turned on later.
const lockRecheck = 5 * time.Minute

var (
	_ storage.Bucket           = (*Bucket)(nil)
	_ storage.ExclusivePutter  = (*Bucket)(nil)
	_ storage.ExclusiveChecker = (*Bucket)(nil)
	_ storage.Locker           = (*Bucket)(nil)
	_ storage.LegalHolder      = (*Bucket)(nil)
	_ storage.UploadCleaner    = (*Bucket)(nil)
)

// New returns a Bucket for opts. It validates opts and reads CACertFile but
// sends no request: a wrong endpoint, bucket or credential shows on first
// use, or through Check.
func New(opts Options) (*Bucket, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()

	tr := opts.Transport
	if tr == nil {
		var err error
		if tr, err = newTransport(opts); err != nil {
			return nil, err
		}
	}
	lookup := minio.BucketLookupAuto
	switch opts.BucketLookup {
	case LookupPath:
		lookup = minio.BucketLookupPath
	case LookupDNS:
		lookup = minio.BucketLookupDNS
	}
	core, err := minio.NewCore(opts.Endpoint, &minio.Options{
		Creds:        opts.Credentials,
		Secure:       !opts.Insecure,
		Transport:    tr,
		Region:       opts.Region,
		BucketLookup: lookup,
		MaxRetries:   opts.MaxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 client for %s: %w", opts.Endpoint, err)
	}

	var sse encrypt.ServerSide
	switch opts.Encryption.Mode {
	case SSES3:
		sse = encrypt.NewSSE()
	case SSEKMS:
		if sse, err = encrypt.NewSSEKMS(opts.Encryption.KMSKeyID, nil); err != nil {
			return nil, fmt.Errorf("sse-kms: %w", err)
		}
	}

	b := &Bucket{
		core:     core,
		name:     opts.Bucket,
		opts:     opts,
		sse:      sse,
		log:      opts.Logger.With("bucket", opts.Bucket),
		maxParts: MaxParts,
	}
	return b, nil
}

// newTransport builds minio-go's default transport, trusting the extra
// authorities of opts.
func newTransport(opts Options) (*http.Transport, error) {
	tr, err := minio.DefaultTransport(!opts.Insecure)
	if err != nil {
		return nil, fmt.Errorf("s3 transport: %w", err)
	}
	if err := TrustCAs(tr, opts.CACertPEM, opts.CACertFile); err != nil {
		return nil, err
	}
	return tr, nil
}

// TrustCAs makes tr trust the certificate authorities in pemData and in the
// PEM file named file (either may be empty), in addition to the system's.
// It is what New does with Options.CACertPEM and CACertFile, for a host
// that builds its own transport.
func TrustCAs(tr *http.Transport, pemData []byte, file string) error {
	if len(pemData) == 0 && file == "" {
		return nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if len(pemData) > 0 && !pool.AppendCertsFromPEM(pemData) {
		return errors.New("ca certificates: no certificate in PEM data")
	}
	if file != "" {
		pem, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("ca certificates: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("ca certificates: no certificate in %s", file)
		}
	}
	if tr.TLSClientConfig == nil {
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tr.TLSClientConfig.RootCAs = pool
	return nil
}

// Client returns the minio-go client, for what this package does not
// offer. Writes through it bypass this package's guarantees.
func (b *Bucket) Client() *minio.Client { return b.core.Client }

// Name returns the bucket's name.
func (b *Bucket) Name() string { return b.name }

// String describes the bucket without credentials.
func (b *Bucket) String() string {
	return fmt.Sprintf("s3.Bucket(%s/%s)", b.opts.Endpoint, b.name)
}

// GoString is String, so that %#v cannot print credentials.
func (b *Bucket) GoString() string { return b.String() }

// Check asks the store whether the bucket exists and the credentials may
// see it. The error matches storage.ErrBucketNotFound or
// storage.ErrPermission when that is the trouble.
func (b *Bucket) Check(ctx context.Context) error {
	ok, err := b.core.BucketExists(ctx, b.name)
	if err != nil {
		return translate("check", "", err)
	}
	if !ok {
		return storage.Errorf("check", "", storage.ErrBucketNotFound, fmt.Errorf("bucket %s", b.name))
	}
	return nil
}

// Get implements storage.Bucket. The request is sent before Get returns,
// so a missing key fails Get itself with storage.ErrNotFound.
func (b *Bucket) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := storage.ValidateKey(key); err != nil {
		return nil, storage.Errorf("get", key, nil, err)
	}
	rc, _, _, err := b.core.GetObject(ctx, b.name, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, translate("get", key, err)
	}
	return &objectReader{rc: rc, key: key}, nil
}

// objectReader wraps read errors other than io.EOF in a *storage.Error.
type objectReader struct {
	rc  io.ReadCloser
	key string
}

func (r *objectReader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	if err != nil && err != io.EOF {
		err = translate("read", r.key, err)
	}
	return n, err
}

func (r *objectReader) Close() error { return r.rc.Close() }

// Stat implements storage.Bucket.
func (b *Bucket) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	if err := storage.ValidateKey(key); err != nil {
		return storage.ObjectInfo{}, storage.Errorf("stat", key, nil, err)
	}
	info, err := b.core.StatObject(ctx, b.name, key, minio.StatObjectOptions{})
	if err != nil {
		return storage.ObjectInfo{}, translate("stat", key, err)
	}
	return storage.ObjectInfo{Key: key, Size: info.Size, ModTime: info.LastModified, ETag: info.ETag,
		Metadata: storage.WithoutPutToken(userMetadata(info.UserMetadata))}, nil
}

// userMetadata returns the user metadata of a StatObject answer with the
// lowercase keys Put was given, or nil when there is none. It keeps
// storage.PutTokenKey; Stat leaves it out.
func userMetadata(m minio.StringMap) map[string]string {
	if len(m) == 0 {
		return nil
	}
	md := make(map[string]string, len(m))
	for k, v := range m {
		md[strings.ToLower(k)] = v
	}
	return md
}

// CanPutIfAbsent implements storage.ExclusiveChecker: false when the
// options declare a store without conditional writes.
func (b *Bucket) CanPutIfAbsent() bool { return !b.opts.NoConditionalWrites }

// List implements storage.Bucket. It lists recursively with
// ListObjectsV2, one page of up to 1000 keys per request. Breaking out of
// the loop cancels the listing. A listing cut short by ctx ends with ctx's
// error rather than silently, and keys out of ascending order (a store
// breaking S3's contract) end it with an error too.
func (b *Bucket) List(ctx context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error] {
	return func(yield func(storage.ObjectInfo, error) bool) {
		if err := storage.ValidatePrefix(prefix); err != nil {
			yield(storage.ObjectInfo{}, storage.Errorf("list", prefix, nil, err))
			return
		}
		lctx, cancel := context.WithCancel(ctx)
		defer cancel()
		noOwner := false
		var last string
		for obj := range b.core.ListObjectsIter(lctx, b.name, minio.ListObjectsOptions{
			Prefix:     prefix,
			Recursive:  true,
			FetchOwner: &noOwner,
		}) {
			if obj.Err != nil {
				yield(storage.ObjectInfo{}, translate("list", prefix, obj.Err))
				return
			}
			if err := ctxError(ctx); err != nil {
				break // the rest of a fetched page is not worth yielding
			}
			if last != "" && obj.Key <= last {
				yield(storage.ObjectInfo{}, storage.Errorf("list", prefix, nil,
					fmt.Errorf("store listed %q after %q, out of ascending order", obj.Key, last)))
				return
			}
			last = obj.Key
			info := storage.ObjectInfo{Key: obj.Key, Size: obj.Size, ModTime: obj.LastModified, ETag: obj.ETag}
			if !yield(info, nil) {
				return
			}
		}
		// minio-go ends the sequence quietly when the context is done.
		if err := ctxError(ctx); err != nil {
			yield(storage.ObjectInfo{}, storage.Errorf("list", prefix, nil, err))
		}
	}
}

// Delete implements storage.Bucket. Deleting a missing key is not an
// error. See Options.DeleteAllVersions for versioned and object-lock
// buckets.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	if err := storage.ValidateKey(key); err != nil {
		return storage.Errorf("delete", key, nil, err)
	}
	if b.opts.DeleteAllVersions {
		return b.deleteAllVersions(ctx, key)
	}
	state, err := b.objectLocking(ctx, key)
	switch {
	case err != nil:
		return err
	case state == lockGone:
		return nil
	case state == lockOn:
		return b.deleteAllVersions(ctx, key)
	}
	return translate("delete", key, b.core.RemoveObject(ctx, b.name, key, minio.RemoveObjectOptions{}))
}

// lockState is what Delete knows of a bucket's object lock.
type lockState int

const (
	lockOff  lockState = iota // no object lock: a plain DELETE frees the object
	lockOn                    // object lock: delete the versions and meet the lock
	lockGone                  // the key has no current version: nothing to hide
)

// objectLocking tells whether the bucket has object lock, asking the store
// at most every lockRecheck: on such a bucket a DELETE without a version
// only hides a locked or legally held object behind a delete marker, and
// succeeds, so Delete removes the versions and meets the lock instead.
//
// A key without s3:GetBucketObjectLockConfiguration asks the object
// instead (probeLocking). Only a store that does not implement the
// question at all (NotImplemented) counts as one without object lock.
func (b *Bucket) objectLocking(ctx context.Context, key string) (lockState, error) {
	b.lockMu.Lock()
	if !b.lockAsked.IsZero() && time.Since(b.lockAsked) < lockRecheck {
		defer b.lockMu.Unlock()
		return lockOf(b.locking), nil
	}
	b.lockMu.Unlock()
	enabled, _, _, _, err := b.core.GetObjectLockConfig(ctx, b.name)
	switch {
	case err == nil:
		return b.remember(enabled == "Enabled"), nil
	case errCode(err) == "ObjectLockConfigurationNotFoundError" || isLockMissingErr(err):
		return b.remember(false), nil
	case errors.Is(sentinelOf(err), storage.ErrPermission):
		b.log.DebugContext(ctx, "object lock configuration unreadable; asking the object", "error", err)
		return b.probeLocking(ctx, key, "")
	case errors.Is(sentinelOf(err), storage.ErrUnsupported):
		b.log.DebugContext(ctx, "object lock not implemented by the store; deleting without versions", "error", err)
		return lockOff, nil
	default:
		return lockOff, storage.Errorf("delete", key, nil,
			fmt.Errorf("read object lock configuration: %w", translate("delete", "", err)))
	}
}

// probeLocking learns whether the bucket has object lock from the
// object's retention, or else its legal hold: both answer "bucket is
// missing object lock configuration" on a bucket without it. When neither
// may be read, Delete cannot tell whether a plain DELETE would hide a
// locked object, and refuses with ErrLockUnknown. A key whose current
// version is missing or a delete marker may still have older versions,
// which Delete removes on a bucket with object lock: those are asked in
// its stead (probeVersions).
func (b *Bucket) probeLocking(ctx context.Context, key, versionID string) (lockState, error) {
	var errs []error
	for _, ask := range []func() error{
		func() error { _, _, err := b.core.GetObjectRetention(ctx, b.name, key, versionID); return err },
		func() error {
			_, err := b.core.GetObjectLegalHold(ctx, b.name, key, minio.GetObjectLegalHoldOptions{VersionID: versionID})
			return err
		},
	} {
		err := ask()
		switch {
		case err == nil || errCode(err) == "NoSuchObjectLockConfiguration":
			return b.remember(true), nil
		case isLockMissingErr(err):
			return b.remember(false), nil
		case versionID == "" && (errors.Is(sentinelOf(err), storage.ErrNotFound) || errCode(err) == "MethodNotAllowed"):
			// No current version, or a delete marker (405).
			return b.probeVersions(ctx, key)
		case !errors.Is(sentinelOf(err), storage.ErrPermission):
			return lockOff, translate("delete", key, err)
		}
		errs = append(errs, err)
	}
	return lockOff, storage.Errorf("delete", key, storage.ErrPermission, fmt.Errorf(
		"%w: the bucket's object lock configuration and the object's retention and legal hold are all refused "+
			"(grant s3:GetBucketObjectLockConfiguration, or set DeleteAllVersions): %w",
		ErrLockUnknown, errors.Join(errs...)))
}

// probeVersions asks the newest version of key that is not a delete
// marker, if any: without one a DELETE would hide nothing, and deleting a
// missing key is not an error; with one, the bucket's object lock decides
// whether Delete removes it, as it would with the configuration readable.
// Versions that may not be listed leave the lock unknown: ErrLockUnknown.
func (b *Bucket) probeVersions(ctx context.Context, key string) (lockState, error) {
	versions, err := b.versions(ctx, key)
	if errors.Is(err, storage.ErrPermission) {
		return lockOff, storage.Errorf("delete", key, storage.ErrPermission, fmt.Errorf(
			"%w: the key has no current version and its versions may not be listed "+
				"(grant s3:ListBucketVersions or s3:GetBucketObjectLockConfiguration): %w", ErrLockUnknown, err))
	}
	if err != nil {
		return lockOff, err
	}
	for _, v := range versions {
		if !v.IsDeleteMarker && v.VersionID != "" {
			return b.probeLocking(ctx, key, v.VersionID)
		}
	}
	return lockGone, nil
}

// remember records the store's answer about object lock.
func (b *Bucket) remember(locking bool) lockState {
	b.lockMu.Lock()
	defer b.lockMu.Unlock()
	b.lockAsked, b.locking = time.Now(), locking
	return lockOf(locking)
}

func lockOf(locking bool) lockState {
	if locking {
		return lockOn
	}
	return lockOff
}

// deleteAllVersions removes the versions of key oldest first, so that a
// failure part way (a locked version) leaves the newest version, and so
// the object's content, as it was.
func (b *Bucket) deleteAllVersions(ctx context.Context, key string) error {
	versions, err := b.versions(ctx, key)
	if err != nil {
		return err
	}
	// Newest first from the store; delete in reverse.
	for _, v := range slices.Backward(versions) {
		err := b.core.RemoveObject(ctx, b.name, key, minio.RemoveObjectOptions{VersionID: v.VersionID})
		if err != nil {
			return translate("delete", key, err)
		}
	}
	return nil
}

// versions lists the versions and delete markers of key itself, newest
// first.
func (b *Bucket) versions(ctx context.Context, key string) ([]minio.ObjectInfo, error) {
	lctx, cancel := context.WithCancel(ctx)
	var versions []minio.ObjectInfo
	for obj := range b.core.ListObjectsIter(lctx, b.name, minio.ListObjectsOptions{
		Prefix:       key,
		Recursive:    true,
		WithVersions: true,
	}) {
		if obj.Err != nil {
			cancel()
			return nil, translate("delete", key, obj.Err)
		}
		if obj.Key != key {
			// Versions come grouped by key in ascending order, and every
			// other key under this prefix sorts after key itself.
			break
		}
		versions = append(versions, obj)
	}
	cancel()
	if err := ctxError(ctx); err != nil {
		return nil, storage.Errorf("delete", key, nil, err)
	}
	return versions, nil
}
