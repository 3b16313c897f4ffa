package s3

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// Limits and defaults of multipart uploads.
const (
	// MinPartSize is the smallest part S3 accepts (except for the last one).
	MinPartSize int64 = 5 << 20
	// MaxPartSize is the largest part S3 accepts.
	MaxPartSize int64 = 5 << 30
	// MaxParts is the most parts one S3 multipart upload may have, so the
	// largest object Put can write is MaxParts x PartSize bytes.
	MaxParts = 10000

	// DefaultPartSize is the part size when Options.PartSize is zero. It
	// caps objects at 10,000 x 8 MiB = 78.1 GiB.
	DefaultPartSize int64 = 8 << 20
	// DefaultPartsInFlight is the number of part buffers when
	// Options.PartsInFlight is zero.
	DefaultPartsInFlight = 4
	// DefaultAbortTimeout bounds the cleanup of a failed upload when
	// Options.AbortTimeout is zero.
	DefaultAbortTimeout = time.Minute
	// DefaultEndpoint is the endpoint when Options.Endpoint is empty.
	DefaultEndpoint = "s3.amazonaws.com"
)

// BucketLookup selects how requests address the bucket.
type BucketLookup string

// The bucket lookup styles.
const (
	// LookupAuto uses virtual-host style for Amazon S3 and a few other
	// known providers, path style elsewhere. The zero value means auto.
	LookupAuto BucketLookup = "auto"
	// LookupPath puts the bucket in the path (http://host/bucket/key), as
	// MinIO and most self-hosted stores expect.
	LookupPath BucketLookup = "path"
	// LookupDNS puts the bucket in the host name (http://bucket.host/key).
	LookupDNS BucketLookup = "dns"
)

// SSEMode is a server-side encryption mode.
type SSEMode string

// The server-side encryption modes.
const (
	// SSENone stores objects as the bucket's default encryption says.
	SSENone SSEMode = ""
	// SSES3 asks the store to encrypt with keys it manages (AES256).
	SSES3 SSEMode = "SSE-S3"
	// SSEKMS asks the store to encrypt with a key of its KMS.
	SSEKMS SSEMode = "SSE-KMS"
)

// SSE configures server-side encryption. The zero value requests none.
type SSE struct {
	// Mode is SSENone, SSES3 or SSEKMS.
	Mode SSEMode
	// KMSKeyID names the KMS key for SSEKMS. Empty means the store's
	// default key (on AWS, aws/s3). It is an identifier, not a secret.
	KMSKeyID string
}

// Options configures a Bucket. Only Bucket is required; every other zero
// value means the documented default.
type Options struct {
	// Endpoint is the store's host[:port], without a scheme or path.
	// Empty means DefaultEndpoint (Amazon S3).
	Endpoint string

	// Bucket is the bucket's name. Required.
	Bucket string

	// Region is the bucket's region. Empty lets the client ask the store
	// for the bucket's location on first use.
	Region string

	// Insecure talks plain HTTP instead of HTTPS, as a local MinIO does.
	Insecure bool

	// BucketLookup selects path- or virtual-host-style requests. Empty
	// means LookupAuto; use LookupPath for MinIO.
	BucketLookup BucketLookup

	// CACertPEM holds PEM certificates of authorities trusted for HTTPS
	// in addition to the system's. Nil adds none.
	CACertPEM []byte

	// CACertFile names a PEM file of extra trusted authorities, read by
	// New. Empty adds none.
	CACertFile string

	// Credentials signs requests. Nil means DefaultCredentials(): the
	// environment, then ~/.aws/credentials, then an IAM role.
	Credentials *credentials.Credentials

	// Encryption requests server-side encryption for every object written.
	// The zero value requests none.
	Encryption SSE

	// PartSize is the size of each part of a multipart upload, and of each
	// part buffer. Zero means DefaultPartSize; it may not be below
	// MinPartSize nor above MaxPartSize. The largest object Put can write
	// is MaxParts x PartSize.
	PartSize int64

	// PartsInFlight is the number of part buffers one Put uses: while the
	// reader fills one, the others upload. A Put holds at most
	// PartsInFlight x PartSize bytes of buffers (its budget), mapped
	// outside the Go heap on Unix systems and unmapped when the Put
	// returns. Zero means DefaultPartsInFlight.
	PartsInFlight int

	// AdaptiveParts lets a Put size its parts after the first within the
	// budget from what it measures (see the package documentation): where
	// a part's upload takes longer than filling the next, smaller parts
	// and more of them in flight; where the store keeps up easily, larger
	// parts (at most half the budget) and fewer requests. False, the
	// default, makes every part PartSize bytes, PartsInFlight of them in
	// flight.
	//
	// Measured against MinIO on loopback bandwidth with every part request
	// held 100 ms or 800 ms, adaptive parts gained nothing (see the package
	// documentation): where the round trip dominates, an upload moves
	// about the budget per round trip however it is split, so the budget
	// is the lever. Adaptive parts may help where a part's
	// time grows with its size (a slow link) or the reader is much slower
	// than the store (fewer, larger requests). Set it only for stores that
	// accept parts of several sizes, as Amazon S3, MinIO and Ceph RGW do:
	// some refuse them ("All non-trailing parts must have the same
	// length": Cloudflare R2, Garage).
	AdaptiveParts bool

	// AbortTimeout bounds the abort of a failed multipart upload, which
	// runs even when the Put's context is cancelled. Zero means
	// DefaultAbortTimeout.
	AbortTimeout time.Duration

	// MaxRetries is how many times a failed request is tried in all. Zero
	// means minio-go's default (10); 1 disables retries.
	MaxRetries int

	// UnsignedPayload sends request bodies over plain HTTP unsigned
	// (x-amz-content-sha256: UNSIGNED-PAYLOAD), as they always go over
	// HTTPS, instead of hashing every part with SHA-256 for the signature.
	// The store still checks each part's CRC32C, and restore checks the
	// manifest's SHA-256 of the whole object; what is lost is the
	// signature's protection of the body against someone who can alter
	// traffic on the network, so use it on trusted networks only. It
	// saves one SHA-256 pass over the data in the client and one in the
	// store.
	UnsignedPayload bool

	// DeleteAllVersions makes Delete remove every version of the key,
	// oldest first, so that a versioned bucket really frees the object
	// and a lock still in force fails the Delete with storage.ErrLocked.
	// Delete does so anyway on a bucket with object lock, as the store
	// says (asked again every five minutes; a key that may not ask learns
	// it from the object's retention or legal hold, and Delete fails with
	// ErrLockUnknown when it may read none of them). When false, on a
	// versioned bucket without object lock Delete sends one DELETE without
	// a version, which hides the object behind a delete marker.
	DeleteAllVersions bool

	// NoConditionalWrites declares a store that ignores S3's conditional
	// writes (If-None-Match: *), as some older S3-compatible stores do,
	// where a PutIfAbsent would silently overwrite. PutIfAbsent then fails
	// with storage.ErrUnsupported and CanPutIfAbsent reports false, so that
	// writers make their keys unique instead. Amazon S3, MinIO, Ceph RGW
	// (Squid and later) and Cloudflare R2 honour the header.
	NoConditionalWrites bool

	// Transport carries the HTTP requests, for instance to inject faults in
	// tests. Nil means a transport built from the options above. It may
	// not be combined with CACertPEM or CACertFile: configure its TLS
	// instead.
	Transport http.RoundTripper

	// Logger receives debug records of multipart uploads and warnings when
	// cleanup fails. Nil discards them.
	Logger *slog.Logger
}

// Validate reports every problem with o without touching the network or
// the file system.
func (o Options) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if o.Bucket == "" {
		add("bucket is required")
	} else if err := s3utils.CheckValidBucketName(o.Bucket); err != nil {
		add("bucket %q: %w", o.Bucket, err)
	}
	if err := validateEndpoint(o.Endpoint); err != nil {
		add("endpoint: %w", err)
	}
	switch o.BucketLookup {
	case "", LookupAuto, LookupPath, LookupDNS:
	default:
		add("unknown bucket lookup %q (want auto, path or dns)", o.BucketLookup)
	}
	switch o.Encryption.Mode {
	case SSENone, SSES3:
		if o.Encryption.KMSKeyID != "" {
			add("kms key id given without SSE-KMS")
		}
	case SSEKMS:
	default:
		add("unknown encryption mode %q (want SSE-S3 or SSE-KMS)", o.Encryption.Mode)
	}
	if o.PartSize != 0 && (o.PartSize < MinPartSize || o.PartSize > MaxPartSize) {
		add("part size %d is outside [%d, %d]", o.PartSize, MinPartSize, MaxPartSize)
	}
	if o.PartsInFlight < 0 {
		add("parts in flight %d is negative", o.PartsInFlight)
	}
	if o.AbortTimeout < 0 {
		add("abort timeout %v is negative", o.AbortTimeout)
	}
	if o.MaxRetries < 0 {
		add("max retries %d is negative", o.MaxRetries)
	}
	hasCA := len(o.CACertPEM) > 0 || o.CACertFile != ""
	if len(o.CACertPEM) > 0 && !x509.NewCertPool().AppendCertsFromPEM(o.CACertPEM) {
		add("ca certificates: no certificate in PEM data")
	}
	if hasCA && o.Transport != nil {
		add("ca certificates and a custom transport are exclusive: configure the transport's TLS")
	}
	if hasCA && o.Insecure {
		add("ca certificates given for a plain http endpoint")
	}
	if len(errs) > 0 {
		return fmt.Errorf("s3 options: %w", errors.Join(errs...))
	}
	return nil
}

// validateEndpoint accepts "", host and host:port; it refuses schemes,
// paths and user info, so that no credential can ride in an endpoint.
func validateEndpoint(ep string) error {
	if ep == "" {
		return nil
	}
	if strings.Contains(ep, "://") {
		return errors.New("give host[:port] without a scheme (use Insecure for http)")
	}
	if strings.ContainsAny(ep, "/@?# \t") {
		return errors.New("give host[:port] only, without path, user info or query")
	}
	u, err := url.Parse("//" + ep)
	if err != nil {
		return errors.New("not a host[:port]")
	}
	if u.Hostname() == "" {
		return errors.New("empty host")
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("bad port %q", p)
		}
	} else if strings.HasSuffix(ep, ":") {
		return errors.New("empty port")
	}
	return nil
}

// withDefaults returns o with every zero value replaced by its default.
func (o Options) withDefaults() Options {
	if o.Endpoint == "" {
		o.Endpoint = DefaultEndpoint
	}
	if o.BucketLookup == "" {
		o.BucketLookup = LookupAuto
	}
	if o.PartSize == 0 {
		o.PartSize = DefaultPartSize
	}
	if o.PartsInFlight == 0 {
		o.PartsInFlight = DefaultPartsInFlight
	}
	if o.AbortTimeout == 0 {
		o.AbortTimeout = DefaultAbortTimeout
	}
	if o.Credentials == nil {
		o.Credentials = DefaultCredentials()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// String describes o without credentials: it is safe to log.
func (o Options) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "s3.Options{Endpoint: %q, Bucket: %q, Region: %q, Insecure: %t, BucketLookup: %q",
		o.Endpoint, o.Bucket, o.Region, o.Insecure, o.BucketLookup)
	if len(o.CACertPEM) > 0 {
		fmt.Fprintf(&b, ", CACertPEM: %d bytes", len(o.CACertPEM))
	}
	if o.CACertFile != "" {
		fmt.Fprintf(&b, ", CACertFile: %q", o.CACertFile)
	}
	if o.Credentials != nil {
		b.WriteString(", Credentials: <set>")
	} else {
		b.WriteString(", Credentials: <default chain>")
	}
	if o.Encryption.Mode != SSENone {
		fmt.Fprintf(&b, ", Encryption: %s", o.Encryption.Mode)
		if o.Encryption.KMSKeyID != "" {
			fmt.Fprintf(&b, " key %q", o.Encryption.KMSKeyID)
		}
	}
	fmt.Fprintf(&b, ", PartSize: %d, PartsInFlight: %d, AdaptiveParts: %t, AbortTimeout: %v, MaxRetries: %d, DeleteAllVersions: %t",
		o.PartSize, o.PartsInFlight, o.AdaptiveParts, o.AbortTimeout, o.MaxRetries, o.DeleteAllVersions)
	if o.Transport != nil {
		b.WriteString(", Transport: <set>")
	}
	if o.Logger != nil {
		b.WriteString(", Logger: <set>")
	}
	b.WriteString("}")
	return b.String()
}

// GoString is String, so that %#v cannot print credentials either.
func (o Options) GoString() string { return o.String() }

// PartsWithin returns the part size and the parts in flight of uploads
// that hold at most budget bytes of part buffers: DefaultPartSize parts
// (MinPartSize ones below two of those), at least two in flight, so that
// one part uploads while the next fills. Below 2 x MinPartSize it returns
// that floor. On a store far away, throughput is about partsInFlight x
// partSize per upload round trip: two 8 MiB parts at 100 ms are 160 MiB/s
// at most, four 80 MiB/s more.
func PartsWithin(budget int64) (partSize int64, partsInFlight int) {
	partSize = DefaultPartSize
	if budget < 2*DefaultPartSize {
		partSize = MinPartSize
	}
	return partSize, int(max(2, budget/partSize))
}
