package s3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/etcdbackup/etcdbackup/internal/cleanup"
	"github.com/etcdbackup/etcdbackup/storage"
)

// Every request that carries object data also carries its CRC32C, which
// the store verifies. Over HTTPS minio-go sends payloads unsigned, so this
// is the only end-to-end check there; it is also what Amazon S3 requires
// for writes to object-lock buckets.
const (
	checksumHeader    = "x-amz-checksum-crc32c"
	checksumAlgHeader = "x-amz-checksum-algorithm"
	checksumAlg       = "CRC32C"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errPartDone is what a part's body returns when the HTTP client reads it
// after the request has returned, which would otherwise race with the
// buffer's reuse.
var errPartDone = errors.New("part body read after its request ended")

// Put implements storage.Bucket.
//
// Put streams r in parts. A stream that ends within the first part
// (Options.PartSize bytes) is sent as one PutObject request; a longer one
// becomes a multipart upload whose parts fill buffers of at most
// Options.PartsInFlight x PartSize bytes in all: the caller's goroutine
// fills one buffer while the others upload. Parts are PartSize bytes, or
// with Options.AdaptiveParts sized from the pace of the reader and the
// store after the first (see the package documentation). Memory is
// bounded by that budget whatever the object size; every object of up to
// MaxParts x PartSize bytes fits, a larger one may fail with ErrTooLarge.
//
// When r fails, a part fails or ctx is cancelled, Put aborts the multipart
// upload on a context detached from ctx (bounded by Options.AbortTimeout),
// waits for every part request to end, and returns an error that matches
// r's error or ctx's with errors.Is. Put does not interrupt a Read that
// blocks: r should end when ctx does (an io.Pipe closed with the error, for
// instance). If ctx is cancelled while the final request is in flight, the
// store may already have made the object visible.
func (b *Bucket) Put(ctx context.Context, key string, r io.Reader, opts *storage.PutOptions) error {
	return b.put(ctx, key, r, opts, "")
}

// PutIfAbsent implements storage.ExclusivePutter with S3's conditional
// write (If-None-Match: *), sent with PutObject, CreateMultipartUpload and
// CompleteMultipartUpload: a key that exists when the upload starts fails
// at once, one created while it runs fails at completion. Either way the
// error matches storage.ErrExist and nothing is written (Amazon S3's 409
// ConditionalRequestConflict included: see the package documentation).
// Stores that ignore the header (older S3-compatible ones) overwrite
// instead.
//
// The object carries a token of this call (storage.PutTokenKey). When the
// store's answer to the request that created the object is lost and
// minio-go's retry is refused (412, or NoSuchUpload for a completed
// multipart upload), PutIfAbsent finds its own token on the object and
// succeeds: the object is this call's.
//
// With Options.NoConditionalWrites it fails with storage.ErrUnsupported.
func (b *Bucket) PutIfAbsent(ctx context.Context, key string, r io.Reader, opts *storage.PutOptions) error {
	if b.opts.NoConditionalWrites {
		return storage.Errorf("put", key, storage.ErrUnsupported, errors.New("the store is declared without conditional writes"))
	}
	token := storage.NewPutToken()
	err := b.put(ctx, key, r, opts, token)
	if err != nil && b.isOwnObject(ctx, key, token, err) {
		b.log.DebugContext(ctx, "exclusive put refused on retry, the object is this put's own", "key", key)
		return nil
	}
	return err
}

// isOwnObject reports whether err, the failure of an exclusive put, came
// from a retry after the store had created key with token.
func (b *Bucket) isOwnObject(ctx context.Context, key, token string, err error) bool {
	if !errors.Is(err, storage.ErrExist) && !errors.Is(err, storage.ErrNotFound) {
		return false
	}
	info, serr := b.core.StatObject(ctx, b.name, key, minio.StatObjectOptions{})
	if serr != nil {
		return false
	}
	return userMetadata(info.UserMetadata)[storage.PutTokenKey] == token
}

// put writes r to key; a non-empty token makes the write exclusive and is
// stored with the object.
func (b *Bucket) put(ctx context.Context, key string, r io.Reader, po *storage.PutOptions, token string) error {
	exclusive := token != ""
	if err := storage.ValidateKey(key); err != nil {
		return storage.Errorf("put", key, nil, err)
	}
	oo, err := b.objectOptions(po, token)
	if err != nil {
		return storage.Errorf("put", key, nil, err)
	}
	if err := ctxError(ctx); err != nil {
		return storage.Errorf("put", key, nil, err)
	}
	sizer := newPartSizer(b.opts, b.maxParts)
	u := &upload{
		b:         b,
		key:       key,
		r:         r,
		opts:      oo,
		exclusive: exclusive,
		sizer:     sizer,
		pool:      newPartPool(sizer.budget, b.onMap),
	}
	defer u.pool.release()
	return u.run(ctx)
}

// objectOptions turns PutOptions into the options of the request that
// creates the object.
func (b *Bucket) objectOptions(po *storage.PutOptions, token string) (minio.PutObjectOptions, error) {
	md := po.MetadataOrNil()
	o := minio.PutObjectOptions{
		ContentType:          po.ContentTypeOrDefault(),
		ServerSideEncryption: b.sse,
		UserMetadata:         make(map[string]string, len(md)+2),
	}
	for k, v := range md {
		if err := validateMetadata(k, v); err != nil {
			return o, err
		}
		// Prefixed here, so that no metadata key can pass for a header.
		o.UserMetadata["x-amz-meta-"+k] = v
	}
	if token != "" {
		o.UserMetadata["x-amz-meta-"+storage.PutTokenKey] = token
		o.SetMatchETagExcept("*")
	}
	return o, nil
}

// validateMetadata accepts what every S3 store keeps: keys of lowercase
// letters, digits, '-', '_' and '.', values of printable ASCII.
func validateMetadata(k, v string) error {
	if k == "" {
		return errors.New("empty metadata key")
	}
	for _, c := range []byte(k) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("metadata key %q: want lowercase letters, digits, '-', '_' or '.'", k)
		}
	}
	for _, c := range []byte(v) {
		if c < 0x20 || c > 0x7e {
			return fmt.Errorf("metadata %q: value is not printable ASCII", k)
		}
	}
	return nil
}

// upload is the state of one Put.
type upload struct {
	b         *Bucket
	key       string
	r         io.Reader
	opts      minio.PutObjectOptions
	exclusive bool

	sizer *partSizer
	pool  *partPool
	read  int64      // bytes read from r
	mu    sync.Mutex // guards parts
	parts []minio.CompletePart
}

func (u *upload) run(ctx context.Context) error {
	first, err := u.pool.get(ctx, u.sizer.next(1, 0))
	if err != nil {
		return storage.Errorf("put", u.key, nil, err)
	}
	start := time.Now()
	n, eof, err := u.fill(ctx, *first)
	fill := time.Since(start)
	if err != nil {
		return storage.Errorf("put", u.key, nil, err)
	}
	// A full first buffer may be the whole stream: peek one byte, so that
	// an object of exactly PartSize bytes is one plain PutObject too.
	var peek [1]byte
	if !eof {
		m, _, err := u.fill(ctx, peek[:])
		if err != nil {
			return storage.Errorf("put", u.key, nil, err)
		}
		eof = m == 0
	}
	if eof {
		if err := u.single(ctx, (*first)[:n]); err != nil {
			return u.failure(ctx, err)
		}
		return nil
	}
	return u.multipart(ctx, first, fill, peek[0])
}

// fill reads from r until p is full, r ends (eof) or fails, or ctx is done.
func (u *upload) fill(ctx context.Context, p []byte) (n int, eof bool, err error) {
	for n < len(p) {
		if err := ctxError(ctx); err != nil {
			return n, false, err
		}
		m, err := u.r.Read(p[n:])
		n += m
		u.read += int64(m)
		switch {
		case err == io.EOF:
			return n, true, nil
		case err != nil:
			return n, false, readError{err}
		}
	}
	return n, false, nil
}

// single writes data with one PutObject request.
func (u *upload) single(ctx context.Context, data []byte) error {
	o := u.opts
	o.UserMetadata = maps.Clone(u.opts.UserMetadata)
	o.UserMetadata[checksumHeader] = crc32c(data)
	var sha string
	o.DisableContentSha256, sha = u.payloadHash(data)
	for attempt := 1; ; attempt++ {
		body := newPartReader(data)
		_, err := u.b.core.PutObject(ctx, u.b.name, u.key, body, int64(len(data)), "", sha, o)
		body.detach()
		if err == nil || !u.exclusive || !isConditionalConflict(err) || attempt == conflictAttempts {
			return err
		}
		// Amazon S3 answers 409 ConditionalRequestConflict to the loser of
		// two conditional writes of one key in flight at once, and to a
		// write raced by a delete; it documents a retry, which meets the
		// winner's object (412, ErrExist) or writes this one.
		u.b.log.DebugContext(ctx, "conditional write conflict, retrying", "key", u.key, "attempt", attempt)
		if err := sleepCtx(ctx, time.Duration(attempt)*conflictBackoff); err != nil {
			return err
		}
	}
}

// conflictAttempts bounds the PutObject requests of an exclusive put that
// Amazon S3 answers with 409 ConditionalRequestConflict; conflictBackoff is
// the pause before the first retry, growing linearly.
const (
	conflictAttempts = 4
	conflictBackoff  = 100 * time.Millisecond
)

// isConditionalConflict reports Amazon S3's answer to a conditional write
// that raced another write or a delete of its key.
func isConditionalConflict(err error) bool {
	return errCode(err) == "ConditionalRequestConflict"
}

// sleepCtx waits d, or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctxError(ctx)
	}
}

// multipart uploads the full buffer first, the byte peeked after it and
// the rest of r as a multipart upload, and aborts the upload on failure.
func (u *upload) multipart(ctx context.Context, first *[]byte, fill time.Duration, peek byte) error {
	o := u.opts
	o.UserMetadata = maps.Clone(u.opts.UserMetadata)
	o.UserMetadata[checksumAlgHeader] = checksumAlg
	id, err := u.b.core.NewMultipartUpload(ctx, u.b.name, u.key, o)
	if err != nil {
		return u.failure(ctx, err)
	}
	log := u.b.log.With("key", u.key, "upload_id", id)
	log.DebugContext(ctx, "multipart upload started")

	err = u.uploadParts(ctx, id, first, fill, peek)
	if err == nil {
		err = u.complete(ctx, id)
	}
	if err == nil {
		log.DebugContext(ctx, "multipart upload completed", "parts", len(u.parts), "bytes", u.read)
		return nil
	}

	err = u.failure(ctx, err)
	actx, cancel := cleanup.Context(ctx, u.b.opts.AbortTimeout)
	defer cancel()
	aerr := u.b.core.AbortMultipartUpload(actx, u.b.name, u.key, id)
	if aerr != nil && errCode(aerr) != "NoSuchUpload" {
		log.WarnContext(ctx, "abort multipart upload", "error", aerr, "cause", err)
		// %v: the abort's own failure must not change what err matches.
		return fmt.Errorf("%w (abort upload %s: %v)", err, id, aerr)
	}
	log.DebugContext(ctx, "multipart upload aborted", "cause", err)
	return err
}

// uploadParts sends the parts, each in its own goroutine, while the
// caller's goroutine fills the next buffer, of the size the sizer gives
// from the times of the parts before it. It returns once every part
// request has ended.
func (u *upload) uploadParts(ctx context.Context, id string, first *[]byte, firstFill time.Duration, peek byte) error {
	var wg sync.WaitGroup
	defer wg.Wait() // also when r panics, after the cancel below
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	send := func(num int, buf *[]byte, n int, fill time.Duration) {
		wg.Go(func() {
			defer u.pool.put(buf)
			start := time.Now()
			part, err := u.putPart(pctx, id, num, (*buf)[:n])
			if err != nil {
				cancel(fmt.Errorf("upload part %d: %w", num, err))
				return
			}
			if n == len(*buf) { // a short last part says nothing of the pace
				u.sizer.observe(fill, time.Since(start))
			}
			u.mu.Lock()
			u.parts = append(u.parts, part)
			u.mu.Unlock()
		})
	}

	send(1, first, len(*first), firstFill)
	num, written := 1, int64(len(*first))
	for {
		buf, err := u.pool.get(pctx, u.sizer.next(num+1, written))
		if err != nil {
			cancel(err) // a no-op when pctx is done: its cause says why
			break
		}
		off := 0
		if num == 1 {
			(*buf)[0] = peek
			off = 1
		}
		start := time.Now()
		n, eof, err := u.fill(pctx, (*buf)[off:])
		fill := time.Since(start)
		n += off
		if err != nil {
			u.pool.put(buf)
			cancel(err)
			break
		}
		if n == 0 {
			u.pool.put(buf) // r ended on a part boundary
			break
		}
		if num == u.b.maxParts {
			u.pool.put(buf)
			cancel(fmt.Errorf("%w: more than %d parts (%d bytes read, at least %d bytes fit in parts of %d); raise the part size",
				ErrTooLarge, u.b.maxParts, u.read, u.sizer.limit, u.b.opts.PartSize))
			break
		}
		num++
		written += int64(n)
		send(num, buf, n, fill)
		if eof {
			break
		}
	}
	wg.Wait()
	if err := ctxError(ctx); err != nil {
		return err
	}
	return context.Cause(pctx)
}

// putPart sends one part with its CRC32C.
func (u *upload) putPart(ctx context.Context, id string, num int, data []byte) (minio.CompletePart, error) {
	sum := crc32c(data)
	hdr := make(http.Header, 2)
	hdr.Set(checksumHeader, sum)
	hdr.Set(checksumAlgHeader, checksumAlg)
	po := minio.PutObjectPartOptions{SSE: u.b.sse, CustomHeader: hdr}
	po.DisableContentSha256, po.Sha256Hex = u.payloadHash(data)
	body := newPartReader(data)
	defer body.detach()
	p, err := u.b.core.PutObjectPart(ctx, u.b.name, u.key, id, num, body, int64(len(data)), po)
	if err != nil {
		return minio.CompletePart{}, err
	}
	return minio.CompletePart{PartNumber: num, ETag: p.ETag, ChecksumCRC32C: sum}, nil
}

func (u *upload) complete(ctx context.Context, id string) error {
	if err := ctxError(ctx); err != nil {
		return err
	}
	slices.SortFunc(u.parts, func(a, b minio.CompletePart) int { return a.PartNumber - b.PartNumber })
	var o minio.PutObjectOptions
	if u.exclusive {
		o.SetMatchETagExcept("*")
	}
	_, err := u.b.core.CompleteMultipartUpload(ctx, u.b.name, u.key, id, u.parts, o)
	if err != nil && u.exclusive && isConditionalConflict(err) {
		// Amazon S3's answer to a completion that raced another write of
		// the key. Its documented remedy, a new upload of every part,
		// needs the stream again, which Put no longer has: when the other
		// write has made an object visible, the key is taken (ErrExist,
		// as the 412 a later completion would get); otherwise the put
		// fails and nothing is written.
		if _, serr := u.b.core.StatObject(ctx, u.b.name, u.key, minio.StatObjectOptions{}); serr == nil {
			return fmt.Errorf("%w: %w", storage.ErrExist, err)
		}
	}
	return err
}

// failure turns err into Put's error: ctx's error when ctx is done, r's
// error as it is, else err with the storage sentinel of its S3 error code.
func (u *upload) failure(ctx context.Context, err error) error {
	if cerr := ctxError(ctx); cerr != nil {
		return storage.Errorf("put", u.key, nil, cerr)
	}
	if errors.As(err, new(readError)) {
		return storage.Errorf("put", u.key, nil, err)
	}
	return translate("put", u.key, err)
}

// readError is an error of the reader given to Put.
type readError struct{ err error }

func (e readError) Error() string { return "read: " + e.err.Error() }
func (e readError) Unwrap() error { return e.err }

// partReader is a request body over a part buffer that stops reading the
// buffer once detached, so that an HTTP client still holding the body after
// the request returned cannot see the buffer's next content.
type partReader struct {
	mu   sync.Mutex
	r    bytes.Reader
	done bool
}

func newPartReader(data []byte) *partReader {
	p := &partReader{}
	p.r.Reset(data)
	return p
}

func (p *partReader) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return 0, errPartDone
	}
	return p.r.Read(b)
}

// Seek lets minio-go rewind the body to retry a request.
func (p *partReader) Seek(offset int64, whence int) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return 0, errPartDone
	}
	return p.r.Seek(offset, whence)
}

func (p *partReader) detach() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = true
}

// payloadHash returns what signs a request's body. Over plain HTTP that is
// the body's SHA-256, computed here in one pass over the buffer: minio-go
// would otherwise sign the body in 64 KiB chunks (aws-chunked), which
// allocates about 1 MiB of garbage per 8 MiB part. Over HTTPS the body goes
// unsigned, as minio-go sends it, protected by TLS and its CRC32C.
func (u *upload) payloadHash(data []byte) (disableStreaming bool, sha256Hex string) {
	if !u.b.opts.Insecure {
		return false, ""
	}
	if u.b.opts.UnsignedPayload {
		return true, "" // minio-go then signs UNSIGNED-PAYLOAD
	}
	sum := sha256.Sum256(data)
	return true, hex.EncodeToString(sum[:])
}

// crc32c returns data's CRC32C as S3 headers spell it.
func crc32c(data []byte) string {
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc32.Checksum(data, castagnoli))
	return base64.StdEncoding.EncodeToString(sum[:])
}
