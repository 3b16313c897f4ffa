package blob

import (
	"context"
	"errors"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	gcblob "gocloud.dev/blob"

	"github.com/etcdbackup/etcdbackup/internal/cleanup"
	"github.com/etcdbackup/etcdbackup/storage"
)

// What happens to a multipart upload when a Put fails on s3blob
//
// s3blob uploads through the AWS transfer manager on the context of the
// Writer. Put cancels that context before it closes the Writer, so the
// transfer manager's requests fail and it calls AbortMultipartUpload, but on
// the same, cancelled context (its FailTimeout, which would detach the abort,
// is not set by s3blob and cannot be set through it), so the abort fails and
// the upload stays, with its parts, until someone aborts it. The same
// happens when the caller cancels ctx.
//
// The transfer manager does report the upload: its error implements
// transfermanager.MultipartUploadError. Put aborts that exact upload on a
// context detached from the cancelled one. If the error names no upload but
// a multipart upload may have been created (the context was cancelled while
// CreateMultipartUpload was in flight), Put lists the uploads of exactly
// its key and aborts those initiated since it started, by S3's clock against
// the local one truncated to the second. A local clock ahead of S3's by more
// than that misses the upload (UploadCleaner can still collect it); another
// Put of the same key started meanwhile loses its upload and fails.

// s3Target is where a Put on s3blob writes, as the driver spells it: the
// bucket, and the key after gocloud's escaping and prefixing.
type s3Target struct {
	bucket string
	key    string
}

// capture is a WriterOptions.BeforeWrite that records the target.
func (t *s3Target) capture(as func(any) bool) error {
	var in *transfermanager.UploadObjectInput
	if as(&in) {
		t.bucket, t.key = aws.ToString(in.Bucket), aws.ToString(in.Key)
	}
	return nil
}

// abortFailedUpload aborts the multipart upload a failed Put of target left
// behind. err is the error of the write, written the bytes handed to it.
func (b *Bucket) abortFailedUpload(ctx context.Context, target *s3Target, start time.Time, written int64, err error) {
	if target.bucket == "" || target.key == "" {
		return // the driver never prepared the upload
	}
	ctx, cancel := cleanup.Context(ctx, b.opts.CleanupTimeout)
	defer cancel()

	var failed transfermanager.MultipartUploadError
	if err != nil && errors.As(err, &failed) && failed.UploadID() != "" {
		b.abort(ctx, target.bucket, target.key, failed.UploadID())
		return
	}
	if written == 0 {
		return // nothing was read: no part, no upload
	}
	// S3 reports times in whole seconds at best.
	since := start.Truncate(time.Second)
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String(target.bucket), Prefix: aws.String(target.key)}
	for {
		out, lerr := b.s3.ListMultipartUploads(ctx, in)
		if lerr != nil {
			b.logCleanup("list multipart uploads after a failed put", target, "", lerr)
			return
		}
		for _, u := range out.Uploads {
			if aws.ToString(u.Key) == target.key && !aws.ToTime(u.Initiated).Before(since) {
				b.abort(ctx, target.bucket, target.key, aws.ToString(u.UploadId))
			}
		}
		if !aws.ToBool(out.IsTruncated) || !advance(in, out) {
			return
		}
	}
}

// advance moves in to the page after out, and reports false when the store
// gave no new markers, which would repeat the page forever.
func advance(in *s3.ListMultipartUploadsInput, out *s3.ListMultipartUploadsOutput) bool {
	key, id := aws.ToString(out.NextKeyMarker), aws.ToString(out.NextUploadIdMarker)
	if key == aws.ToString(in.KeyMarker) && id == aws.ToString(in.UploadIdMarker) {
		return false
	}
	in.KeyMarker, in.UploadIdMarker = nonEmpty(key), nonEmpty(id)
	return true
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
}

func (b *Bucket) abort(ctx context.Context, bucket, key, id string) {
	_, err := b.s3.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
		Bucket:   aws.String(bucket),
		Key:      aws.String(key),
		UploadId: aws.String(id),
	})
	if err != nil && !isNoSuchUpload(err) {
		b.logCleanup("abort multipart upload after a failed put", &s3Target{bucket, key}, id, err)
	}
}

func (b *Bucket) logCleanup(msg string, t *s3Target, id string, err error) {
	if b.opts.Logger == nil {
		return
	}
	b.opts.Logger.Warn(msg, "bucket", t.bucket, "key", t.key, "upload_id", id, "err", err)
}

func isNoSuchUpload(err error) bool {
	var ae apiError
	return errors.As(err, &ae) && ae.ErrorCode() == "NoSuchUpload"
}

// s3Location is the bucket of an s3blob bucket and the key prefix gocloud
// puts before every key (a "prefix" URL parameter), unescaped.
type s3Location struct {
	bucket string
	prefix string
}

// errCaptured stops a gocloud call in its Before hook, before any I/O.
var errCaptured = errors.New("captured")

// location learns the bucket name and key prefix from the request gocloud
// would send for a listing, which it stops before it is sent.
func (b *Bucket) location() (s3Location, error) {
	b.locOnce.Do(func() {
		var loc s3Location
		found := false
		before := func(as func(any) bool) error {
			var v2 *s3.ListObjectsV2Input
			var v1 *s3.ListObjectsInput
			switch {
			case as(&v2):
				loc = s3Location{bucket: aws.ToString(v2.Bucket), prefix: unescapeS3(aws.ToString(v2.Prefix))}
				found = true
			case as(&v1):
				loc = s3Location{bucket: aws.ToString(v1.Bucket), prefix: unescapeS3(aws.ToString(v1.Prefix))}
				found = true
			}
			return errCaptured
		}
		_, _, err := b.b.ListPage(context.Background(), gcblob.FirstPageToken, 1, &gcblob.ListOptions{BeforeList: before})
		switch {
		case found:
			b.loc = loc
		case err != nil && !errors.Is(err, errCaptured):
			b.locErr = err
		default:
			b.locErr = errors.New("s3blob did not show its list request")
		}
	})
	return b.loc, b.locErr
}

// s3Key returns the bucket and the key as s3blob writes it on S3, learnt
// from the upload gocloud prepares and that the hook stops before it starts.
func (b *Bucket) s3Key(ctx context.Context, key string) (s3Target, error) {
	var t s3Target
	before := func(as func(any) bool) error {
		_ = t.capture(as)
		return errCaptured
	}
	// A cancelled context, so that nothing could be written even if a
	// driver went on after its hook failed.
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	w, err := b.b.NewWriter(ctx, key, &gcblob.WriterOptions{ContentType: "application/octet-stream", BeforeWrite: before})
	if err == nil {
		_ = w.Close()
	}
	if t.bucket == "" || t.key == "" {
		if err != nil && !errors.Is(err, errCaptured) {
			return t, err
		}
		return t, errors.New("s3blob did not show its upload request")
	}
	return t, nil
}

// IncompleteUploads implements storage.UploadCleaner for s3blob buckets and,
// for the temporary files a killed put leaves, for fileblob buckets opened
// from a URL (see fileIncompleteUploads); on other drivers it yields an error matching storage.ErrUnsupported. It lists
// the uploads of the whole bucket and keeps those under prefix, since some
// S3-compatible stores only match an empty prefix or an exact key.
func (b *Bucket) IncompleteUploads(ctx context.Context, prefix string) iter.Seq2[storage.Upload, error] {
	const op = "list uploads"
	if b.kind == driverFile && b.fileDir != "" {
		return b.fileIncompleteUploads(ctx, prefix)
	}
	return func(yield func(storage.Upload, error) bool) {
		if b.s3 == nil {
			yield(storage.Upload{}, storage.Errorf(op, prefix, storage.ErrUnsupported, nil))
			return
		}
		if err := storage.ValidatePrefix(prefix); err != nil {
			yield(storage.Upload{}, storage.Errorf(op, prefix, nil, err))
			return
		}
		loc, err := b.location()
		if err != nil {
			yield(storage.Upload{}, storage.Errorf(op, prefix, nil, err))
			return
		}
		in := &s3.ListMultipartUploadsInput{Bucket: aws.String(loc.bucket)}
		for {
			out, err := b.s3.ListMultipartUploads(ctx, in)
			if err != nil {
				yield(storage.Upload{}, b.errorf(op, prefix, err, false))
				return
			}
			for _, u := range out.Uploads {
				key, ok := strings.CutPrefix(unescapeS3(aws.ToString(u.Key)), loc.prefix)
				if !ok || !strings.HasPrefix(key, prefix) {
					continue
				}
				up := storage.Upload{Key: key, ID: aws.ToString(u.UploadId), Initiated: aws.ToTime(u.Initiated)}
				if !yield(up, nil) {
					return
				}
			}
			if !aws.ToBool(out.IsTruncated) {
				return
			}
			if !advance(in, out) {
				yield(storage.Upload{}, storage.Errorf(op, prefix, nil, errors.New("truncated upload listing without a next marker")))
				return
			}
		}
	}
}

// AbortUpload implements storage.UploadCleaner for s3blob buckets and
// fileblob buckets opened from a URL; on other drivers it returns an error matching storage.ErrUnsupported. An upload
// that is already gone yields storage.ErrNotFound on AWS; MinIO accepts the
// abort.
func (b *Bucket) AbortUpload(ctx context.Context, u storage.Upload) error {
	const op = "abort upload"
	if err := b.checkKey(op, u.Key); err != nil {
		return err
	}
	if b.kind == driverFile && b.fileDir != "" {
		return b.fileAbortUpload(u)
	}
	if b.s3 == nil {
		return storage.Errorf(op, u.Key, storage.ErrUnsupported, nil)
	}
	if u.ID == "" {
		return storage.Errorf(op, u.Key, nil, errors.New("upload has no ID"))
	}
	t, err := b.s3Key(ctx, u.Key)
	if err != nil {
		return storage.Errorf(op, u.Key, nil, err)
	}
	_, err = b.s3.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
		Bucket:   aws.String(t.bucket),
		Key:      aws.String(t.key),
		UploadId: aws.String(u.ID),
	})
	switch {
	case err == nil:
		return nil
	case isNoSuchUpload(err):
		return storage.Errorf(op, u.Key, storage.ErrNotFound, err)
	default:
		return b.errorf(op, u.Key, err, false)
	}
}

// unescapeS3 reverses the escaping s3blob applies to keys: it writes some
// runes (control characters, the "/" of "../", the first "_" of anything
// that reads like an escape) as "__0x<hex>__".
func unescapeS3(s string) string {
	if !strings.Contains(s, "__0x") {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); {
		if r, n, ok := hexEscape(s[i:]); ok {
			out.WriteRune(r)
			i += n
			continue
		}
		out.WriteByte(s[i])
		i++
	}
	return out.String()
}

// hexEscape decodes an "__0x<hex>__" at the start of s, returning the rune
// and the length of the escape.
func hexEscape(s string) (rune, int, bool) {
	rest, ok := strings.CutPrefix(s, "__0x")
	if !ok {
		return 0, 0, false
	}
	end := strings.IndexByte(rest, '_')
	if end < 0 || !strings.HasPrefix(rest[end:], "__") {
		return 0, 0, false
	}
	v, err := strconv.ParseInt(rest[:end], 16, 32)
	if err != nil {
		return 0, 0, false
	}
	return rune(v), len("__0x") + end + len("__"), true
}
