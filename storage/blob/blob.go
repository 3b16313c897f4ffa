package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	gcblob "gocloud.dev/blob"

	"github.com/etcdbackup/etcdbackup/internal/faultpoint"
	"github.com/etcdbackup/etcdbackup/storage"
)

var (
	_ storage.Bucket           = (*Bucket)(nil)
	_ storage.ExclusivePutter  = (*Bucket)(nil)
	_ storage.ExclusiveChecker = (*Bucket)(nil)
	_ storage.UploadCleaner    = (*Bucket)(nil)
)

// DefaultCleanupTimeout is how long Put may spend, after a failure, aborting
// the multipart upload it left on an S3 bucket.
const DefaultCleanupTimeout = time.Minute

// minS3PartSize is the smallest part S3 accepts but for the last one.
const minS3PartSize = 5 << 20

// copyBufSize is the size of the buffer Put copies the body through. The
// driver keeps its own part buffers; this one only decides how often Put
// looks at the context.
const copyBufSize = 256 << 10

// copyBuffers are Put's copy buffers, shared by every bucket of the
// process: a host with hundreds of followers stores a segment and its
// manifest per follower every second, and would otherwise allocate a
// buffer for each.
var copyBuffers sync.Pool

// Options tunes a Bucket. A nil *Options, and the zero value of each field,
// mean the defaults.
type Options struct {
	// PartSize is the size of the parts drivers upload in, in bytes
	// (gocloud's WriterOptions.BufferSize). Zero means the driver's default
	// (8 MiB for s3blob); on s3blob a smaller value than S3's minimum part
	// of 5 MiB is raised to it. On s3blob a Put holds up to 16 MiB (the
	// transfer manager's multipart threshold, read before it decides) plus
	// PartSize times (MaxConcurrency+1) bytes in memory: 64 MiB with the
	// defaults.
	PartSize int

	// MaxConcurrency is how many parts a driver uploads at once (gocloud's
	// WriterOptions.MaxConcurrency). Zero means the driver's default.
	MaxConcurrency int

	// SortList makes List read the whole listing under the prefix and sort
	// it before yielding the first key, for drivers that do not list in
	// byte order. It is always on for fileblob buckets, whose directory
	// walk puts "a/b" before "a-b". Without it List streams page by page
	// and reports an error if the driver yields a key out of order, which
	// s3blob does for keys it escapes on S3 (a segment ending in "..", or
	// text of the form "__0x41__"), since S3 sorts the escaped form.
	SortList bool

	// NoExclusivePut makes PutIfAbsent answer storage.ErrUnsupported, so
	// that storage.PutIfAbsent falls back to Stat and Put. Set it for
	// S3-compatible stores that ignore If-None-Match, on which a
	// conditional write would silently overwrite.
	NoExclusivePut bool

	// CleanupTimeout bounds the work Put does after a failure to abort the
	// multipart upload it left on an S3 bucket. That work runs on a context
	// detached from the cancelled one. Zero means DefaultCleanupTimeout.
	CleanupTimeout time.Duration

	// Logger receives the failures of that cleanup. Nil means silent.
	Logger *slog.Logger

	// WholeBody has Put hand the body to the driver to read (gocloud's
	// Bucket.Upload) instead of writing it through a Writer. azureblob
	// buckets need it: azureblob's writer panics in Close when its upload
	// failed after the first Write. Open sets it for azblob:// URLs, and
	// package storage/blob/azure for the buckets it opens; a host that
	// gives New an azureblob bucket of its own sets it.
	WholeBody bool

	// ErrorCode reads the HTTP status and the service's error code from a
	// driver's error, for the refusals gocloud leaves Unknown: the driver
	// of a cloud gives it (Driver.ErrorCode; azure.ErrorCode), since this
	// package links no cloud SDK's error types. Nil classifies without.
	ErrorCode func(err error) (status int, code string, ok bool)

	// SyncEachFile makes a file:// bucket that Open opened sync each
	// object's data and ".attrs" files and its directories with fsync(2)
	// instead of joining the puts waiting at the same moment in one
	// syncfs(2) of the file system (see putFile). Puts are as durable
	// either way; the shared sync makes far fewer system calls when many
	// puts run at once, but also waits for whatever else is being written
	// to that file system, which per-file syncs mostly do not.
	SyncEachFile bool
}

// Validate reports whether o is usable. A nil *Options is valid.
func (o *Options) Validate() error {
	if o == nil {
		return nil
	}
	switch {
	case o.PartSize < 0:
		return fmt.Errorf("part size %d is negative", o.PartSize)
	case o.MaxConcurrency < 0:
		return fmt.Errorf("max concurrency %d is negative", o.MaxConcurrency)
	case o.CleanupTimeout < 0:
		return fmt.Errorf("cleanup timeout %v is negative", o.CleanupTimeout)
	}
	return nil
}

// driverKind is what the adapter knows about the driver behind a bucket.
type driverKind int

const (
	driverOther     driverKind = iota
	driverFile                 // gocloud.dev/blob/fileblob
	driverS3                   // gocloud.dev/blob/s3blob
	driverWholeBody            // Options.WholeBody: gocloud.dev/blob/azureblob
)

// Bucket is a storage.Bucket backed by a gocloud.dev/blob bucket. It is
// safe for concurrent use.
type Bucket struct {
	b     *gcblob.Bucket
	opts  Options
	kind  driverKind
	s3    *s3.Client // set for s3blob buckets
	owned bool       // Close closes b

	// fileDir and filePrefix place a fileblob bucket's objects on disk:
	// key k is the file fileDir/escape(filePrefix+k). Open sets them from
	// the URL; fileDir is empty for a fileblob bucket given to New.
	fileDir, filePrefix string
	// durable holds the directories of a file bucket whose names its
	// puts have synced.
	durable durableDirs
	// group syncs the puts of a file bucket together where its file
	// system allows (see groupSync); nil where each put syncs its files.
	group *groupSync

	keepFailedUploads bool // skip abortFailedUpload, to observe the driver alone

	// onSync, when set, sees each file the adapter syncs before it is
	// synced (a test's record of the commit order); an error it returns
	// stands for the sync's.
	onSync func(kind string, f *os.File) error
	// onRename, when set, sees each rename of the adapter's file commit
	// before it happens; an error it returns stands for the rename's.
	onRename func(oldpath, newpath string) error
	// onWriteback, when set, sees each write-back a put paces its data
	// with (writebackWriter) before it starts; an error it returns stands
	// for the write-back's.
	onWriteback func(off, n int64) error

	closeOnce sync.Once
	closeErr  error

	locOnce sync.Once
	loc     s3Location
	locErr  error
}

// New returns a Bucket that uses b, which stays the caller's: Close does not
// close it. Invalid option values (see Options.Validate) are replaced by
// their defaults.
func New(b *gcblob.Bucket, opts *Options) *Bucket {
	bk := &Bucket{b: b}
	if opts != nil {
		bk.opts = *opts
	}
	if bk.opts.PartSize < 0 {
		bk.opts.PartSize = 0
	}
	if bk.opts.MaxConcurrency < 0 {
		bk.opts.MaxConcurrency = 0
	}
	if bk.opts.CleanupTimeout <= 0 {
		bk.opts.CleanupTimeout = DefaultCleanupTimeout
	}
	var client *s3.Client
	var fi os.FileInfo
	switch {
	case b.As(&client):
		bk.kind, bk.s3 = driverS3, client
		if 0 < bk.opts.PartSize && bk.opts.PartSize < minS3PartSize {
			bk.opts.PartSize = minS3PartSize
		}
	case b.As(&fi):
		bk.kind = driverFile
		bk.opts.SortList = true
	case bk.opts.WholeBody:
		bk.kind = driverWholeBody
	}
	return bk
}

// Open opens the bucket at urlstr through mux, which the caller owns and has
// registered the schemes it wants on (package drivers builds one with the
// usual drivers). The URL is the driver's: see the URLOpener of each gocloud
// driver. Close closes the bucket Open opened. Errors never contain the
// URL's query or user information.
func Open(ctx context.Context, mux *gcblob.URLMux, urlstr string, opts *Options) (*Bucket, error) {
	safe := redactURL(urlstr)
	if mux == nil {
		return nil, fmt.Errorf("open %s: no URL mux", safe)
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("open %s: %w", safe, err)
	}
	if strings.HasPrefix(urlstr, "azblob:") {
		o := Options{}
		if opts != nil {
			o = *opts
		}
		o.WholeBody = true
		opts = &o
	}
	b, err := mux.OpenBucket(ctx, urlstr)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", safe, redactError(err, urlstr))
	}
	bk := New(b, opts)
	bk.owned = true
	if bk.kind == driverFile {
		bk.fileDir, bk.filePrefix, err = filePlacement(urlstr)
		if err != nil {
			_ = b.Close()
			return nil, fmt.Errorf("open %s: %w", safe, err)
		}
		if !bk.opts.SyncEachFile {
			if g := openGroupSync(bk.fileDir); g != nil {
				g.sync = func() error { return g.syncFileSystem(bk.onSync) }
				bk.group = g
			}
		}
	}
	return bk, nil
}

// Close closes the underlying bucket if Open opened it, and does nothing for
// a bucket given to New.
func (b *Bucket) Close() error {
	if !b.owned {
		return nil
	}
	b.closeOnce.Do(func() { b.closeErr = errors.Join(b.b.Close(), b.group.close()) })
	return b.closeErr
}

// As exposes the driver's native types through gocloud's Bucket.As: for
// example **s3.Client for s3blob, *os.FileInfo for fileblob.
func (b *Bucket) As(i any) bool { return b.b.As(i) }

// Put implements storage.Bucket. It streams r through a gocloud Writer whose
// context Put cancels before closing it when r or the write fails, so that
// the driver discards what it wrote. On S3, Put then aborts the multipart
// upload the driver may have left behind. Put looks at ctx between reads of
// r: a Read that blocks holds Put until it returns.
//
// The error matches r's error when r failed, and ctx.Err() when ctx ended,
// storage.ErrNoSpace when the store is full. On S3 a cancellation that
// arrives while the request completing the upload is in flight may be too
// late to stop it: S3 may have stored the object.
//
// On a fileblob bucket that Open opened, the object is synced to stable
// storage, with the directories that name it, before Put returns (see
// putFile); a fileblob bucket given to New is written as fileblob writes
// it, with its data synced but not its directory.
func (b *Bucket) Put(ctx context.Context, key string, r io.Reader, opts *storage.PutOptions) error {
	if b.kind == driverFile && b.fileDir != "" {
		if err := b.checkKey("put", key); err != nil {
			return err
		}
		return b.putFile(ctx, key, r, opts, false)
	}
	return b.put(ctx, key, r, opts, false)
}

// PutIfAbsent implements storage.ExclusivePutter with gocloud's
// WriterOptions.IfNotExist, which s3blob (If-None-Match: *), gcsblob
// (ifGenerationMatch=0), azureblob (If-None-Match: *) and memblob check
// atomically. fileblob checks with a separate step before its rename, so on
// a fileblob bucket PutIfAbsent writes a temporary file beside the object
// and links it into place, which fails when the name exists, and syncs it
// as Put does (see putFile). It returns an error matching
// storage.ErrUnsupported when CanPutIfAbsent is false. On the other
// drivers the object carries a token of the call (storage.PutTokenKey):
// when the store's answer was lost and the driver's retry is refused
// because the key exists, PutIfAbsent finds its token there and succeeds.
// Amazon S3's 409 ConditionalRequestConflict (the loser of two conditional
// writes in flight at once) is storage.ErrExist when an object is then
// visible at the key, and otherwise an error after which nothing is
// written; the stream is not sent again.
func (b *Bucket) PutIfAbsent(ctx context.Context, key string, r io.Reader, opts *storage.PutOptions) error {
	if err := b.checkKey("put", key); err != nil {
		return err
	}
	switch {
	case b.opts.NoExclusivePut:
		return storage.Errorf("put", key, storage.ErrUnsupported, errors.New("exclusive puts are turned off for this bucket"))
	case b.kind == driverFile && b.fileDir == "":
		return storage.Errorf("put", key, storage.ErrUnsupported, errors.New("a file bucket given to New has no known directory: open it with Open"))
	case b.kind == driverFile:
		return b.putFile(ctx, key, r, opts, true)
	}
	token := storage.NewPutToken()
	po := storage.PutOptions{ContentType: opts.ContentTypeOrDefault(), Metadata: storage.WithPutToken(opts.MetadataOrNil(), token)}
	err := b.put(ctx, key, r, &po, true)
	if err != nil && b.kind == driverS3 && isConditionalConflict(err) {
		err = b.conflictOutcome(ctx, key, err)
	}
	if err != nil && b.isOwnObject(ctx, key, token, err) {
		return nil
	}
	return err
}

// isConditionalConflict reports Amazon S3's 409 ConditionalRequestConflict:
// its answer, instead of 412, to the loser of two conditional writes of
// one key in flight at once, or to one raced by a delete.
func isConditionalConflict(err error) bool {
	var ae apiError
	return errors.As(err, &ae) && ae.ErrorCode() == "ConditionalRequestConflict"
}

// conflictOutcome reads an exclusive put's 409 ConditionalRequestConflict.
// AWS's remedy, sending the object again, needs the stream, which the put
// has consumed: when an object is now visible at key the key is taken
// (storage.ErrExist, as the 412 a retry would get); otherwise the put
// fails as it is, having written nothing.
func (b *Bucket) conflictOutcome(ctx context.Context, key string, err error) error {
	if _, aerr := b.b.Attributes(ctx, key); aerr != nil {
		return err
	}
	return fmt.Errorf("%w: %w", storage.ErrExist, err)
}

// isOwnObject reports whether err, the failure of an exclusive put, came
// from the driver's retry after the store had created key with token: the
// store's answer to the first request was lost, and the retry was refused
// because the key exists (412), or because the resumable upload session it
// went to had ended with the object's creation (404 on GCS emulators).
func (b *Bucket) isOwnObject(ctx context.Context, key, token string, err error) bool {
	if !errors.Is(err, storage.ErrExist) && !errors.Is(err, storage.ErrNotFound) {
		return false
	}
	a, aerr := b.b.Attributes(ctx, key)
	return aerr == nil && a.Metadata[storage.PutTokenKey] == token
}

// syncOrKeep syncs file, fileblob's temporary file of key, or, with keep,
// sets *keep to a second descriptor of it named by key's path, for the
// caller to sync; where none can be had, it syncs file.
func (b *Bucket) syncOrKeep(file *os.File, key string, keep **os.File) error {
	if keep != nil {
		*keep = nil
		if dup, err := dupFile(file, b.filePath(key)); err == nil {
			*keep = dup
			return nil
		}
	}
	faultpoint.Hit("file-data-written")
	err := b.syncFile(file, "data")
	faultpoint.Hit("file-data-synced")
	return err
}

// dropKept closes the descriptor syncOrKeep kept, if any, for a write
// that failed.
func dropKept(keep **os.File) {
	if keep != nil && *keep != nil {
		_ = (*keep).Close()
		*keep = nil
	}
}

// CanPutIfAbsent implements storage.ExclusiveChecker: true unless
// Options.NoExclusivePut is set or the bucket is a fileblob bucket given to
// New, whose directory the adapter does not know.
func (b *Bucket) CanPutIfAbsent() bool {
	switch {
	case b.opts.NoExclusivePut:
		return false
	case b.kind == driverFile:
		return b.fileDir != ""
	}
	return true
}

func (b *Bucket) put(ctx context.Context, key string, r io.Reader, opts *storage.PutOptions, exclusive bool) error {
	if err := b.checkKey("put", key); err != nil {
		return err
	}
	return b.putChecked(ctx, key, r, opts, exclusive, nil)
}

// putChecked is put for a key already checked, or one of the adapter's own
// temporary keys, which checkKey refuses. On a fileblob bucket it syncs
// the data before fileblob renames it over key, unless keep is not nil:
// then it sets *keep to a second descriptor of the data file (dupFile),
// kept open after fileblob closes its own, which the caller syncs and
// closes (putFile syncs its temporary object so, beside its attributes);
// where no such descriptor can be had, it syncs the data as without keep
// and sets *keep to nil.
func (b *Bucket) putChecked(ctx context.Context, key string, r io.Reader, opts *storage.PutOptions, exclusive bool, keep **os.File) error {
	const op = "put"
	if r == nil {
		return storage.Errorf(op, key, nil, errors.New("nil reader"))
	}
	if err := ctx.Err(); err != nil {
		return storage.Errorf(op, key, nil, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()

	start := time.Now()
	wopts := &gcblob.WriterOptions{
		// An explicit type keeps gocloud from sniffing the first bytes.
		ContentType:    opts.ContentTypeOrDefault(),
		Metadata:       opts.MetadataOrNil(),
		IfNotExist:     exclusive,
		BufferSize:     b.opts.PartSize,
		MaxConcurrency: b.opts.MaxConcurrency,
	}
	var target *s3Target
	var file *os.File // fileblob's temporary file
	switch b.kind {
	case driverS3:
		target = new(s3Target)
		wopts.BeforeWrite = target.capture
	case driverFile:
		wopts.BeforeWrite = func(as func(any) bool) error {
			as(&file)
			return nil
		}
	}
	var written int64
	var readErr, writeErr error
	if b.kind == driverWholeBody {
		// azureblob's writer panics in Close when its upload failed after
		// the first Write (its upload goroutine clears the pipe that Close
		// then closes), so the driver reads the body itself: an upload
		// either commits its block list whole or not at all.
		body := &bodyReader{ctx: ctx, r: r}
		writeErr = b.b.Upload(wctx, key, body, wopts)
		if writeErr == nil {
			return nil
		}
		written, readErr = body.n, body.err
	} else {
		w, err := b.b.NewWriter(wctx, key, wopts)
		if err != nil {
			return b.errorf(op, key, err, exclusive)
		}
		var dst io.Writer = w
		if b.group != nil && keep != nil {
			// A put whose data a shared sync makes durable.
			dst = &writebackWriter{w: w, file: &file, writeback: b.writeback}
		}
		written, readErr, writeErr = copyBody(ctx, dst, r)
		if file != nil && readErr == nil && writeErr == nil && ctx.Err() == nil {
			// fileblob renames its temporary file over the key in Close
			// without syncing it: a crash after the rename could leave
			// the name with no data.
			writeErr = b.syncOrKeep(file, key, keep)
		}
		if readErr == nil && writeErr == nil && ctx.Err() == nil {
			writeErr = w.Close()
			if writeErr == nil {
				return nil
			}
			dropKept(keep)
		} else {
			dropKept(keep)
			// Cancelling before Close is what tells every driver to
			// discard the write instead of committing what it has.
			cancel()
			if cerr := w.Close(); writeErr == nil {
				writeErr = cerr
			}
		}
	}
	if target != nil && !b.keepFailedUploads {
		b.abortFailedUpload(ctx, target, start, written, writeErr)
	}

	ctxErr := ctx.Err()
	switch {
	case readErr != nil && ctxErr != nil && !errors.Is(readErr, ctxErr):
		return storage.Errorf(op, key, nil, fmt.Errorf("%w (read body: %w)", ctxErr, readErr))
	case readErr != nil:
		return storage.Errorf(op, key, nil, fmt.Errorf("read body: %w", readErr))
	case ctxErr != nil && (writeErr == nil || !errors.Is(writeErr, ctxErr)):
		if writeErr == nil {
			return storage.Errorf(op, key, nil, ctxErr)
		}
		return storage.Errorf(op, key, nil, fmt.Errorf("%w (%w)", ctxErr, writeErr))
	default:
		return b.errorf(op, key, writeErr, exclusive)
	}
}

// copyBody copies r to w until r ends, r or w fails, or ctx is done; the
// caller checks ctx. It tells the reader's error from the writer's, which
// io.Copy does not.
func copyBody(ctx context.Context, w io.Writer, r io.Reader) (written int64, readErr, writeErr error) {
	bp, _ := copyBuffers.Get().(*[]byte)
	if bp == nil {
		b := make([]byte, copyBufSize)
		bp = &b
	}
	defer copyBuffers.Put(bp)
	buf := *bp
	for ctx.Err() == nil {
		n, err := r.Read(buf)
		if n > 0 {
			m, werr := w.Write(buf[:n])
			written += int64(m)
			if werr == nil && m < n {
				werr = io.ErrShortWrite
			}
			if werr != nil {
				return written, nil, werr
			}
		}
		switch {
		case err == io.EOF:
			return written, nil, nil
		case err != nil:
			return written, err, nil
		}
	}
	return written, nil, nil
}

// bodyReader is a Put's body as a driver reads it on its own: it ends with
// ctx's error once ctx is done, and keeps the body's own error apart from
// the driver's.
type bodyReader struct {
	ctx context.Context
	r   io.Reader
	n   int64 // bytes read
	err error // the body's error, not io.EOF
}

func (br *bodyReader) Read(p []byte) (int, error) {
	if err := br.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := br.r.Read(p)
	br.n += int64(n)
	if err != nil && err != io.EOF {
		br.err = err
	}
	return n, err
}

// Get implements storage.Bucket. The object is streamed: a missing key fails
// here, and later read errors are translated like Get's own.
func (b *Bucket) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	const op = "get"
	if err := b.checkKey(op, key); err != nil {
		return nil, err
	}
	r, err := b.b.NewReader(ctx, key, nil)
	if err != nil {
		return nil, b.errorf(op, key, err, false)
	}
	return &reader{r: r, b: b, key: key}, nil
}

type reader struct {
	r   *gcblob.Reader
	b   *Bucket
	key string
}

func (r *reader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = r.b.errorf("get", r.key, err, false)
	}
	return n, err
}

func (r *reader) Close() error {
	if err := r.r.Close(); err != nil {
		return r.b.errorf("get", r.key, err, false)
	}
	return nil
}

// Stat implements storage.Bucket.
func (b *Bucket) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	const op = "stat"
	if err := b.checkKey(op, key); err != nil {
		return storage.ObjectInfo{}, err
	}
	a, err := b.b.Attributes(ctx, key)
	if err != nil {
		return storage.ObjectInfo{}, b.errorf(op, key, err, false)
	}
	return storage.ObjectInfo{Key: key, Size: a.Size, ModTime: a.ModTime, ETag: a.ETag,
		Metadata: storage.WithoutPutToken(a.Metadata)}, nil
}

// Delete implements storage.Bucket. A missing key is not an error.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	const op = "delete"
	if err := b.checkKey(op, key); err != nil {
		return err
	}
	if b.kind == driverFile {
		// fileblob removes whatever the path names, an empty directory
		// included, and fails on a directory that has files: only a file
		// is an object.
		if _, err := b.b.Attributes(ctx, key); err != nil {
			if err = b.errorf(op, key, err, false); errors.Is(err, storage.ErrNotFound) {
				return nil
			}
			return err
		}
	}
	if err := b.b.Delete(ctx, key); err != nil {
		if err = b.errorf(op, key, err, false); errors.Is(err, storage.ErrNotFound) {
			return nil
		}
		return err
	}
	return nil
}

// checkKey validates key before any I/O.
func (b *Bucket) checkKey(op, key string) error {
	if err := storage.ValidateKey(key); err != nil {
		return storage.Errorf(op, key, nil, err)
	}
	if b.kind == driverFile {
		if reason := fileReserved(key); reason != "" {
			return storage.Errorf(op, key, storage.ErrInvalidKey, errors.New(reason))
		}
	}
	return nil
}

// redactURL returns the scheme, host and path of urlstr, without user
// information or query, which may carry credentials.
func redactURL(urlstr string) string {
	u, err := url.Parse(urlstr)
	if err != nil {
		return "bucket URL"
	}
	safe := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	return safe.String()
}

// redactError hides urlstr, which drivers print into their errors, behind
// its redacted form.
func redactError(err error, urlstr string) error {
	msg := err.Error()
	safe := redactURL(urlstr)
	pairs := []string{urlstr, safe}
	u, perr := url.Parse(urlstr)
	if perr == nil {
		// Longest first: the whole URL in its spellings, then its parts.
		pairs = append(pairs, u.String(), safe, u.Redacted(), safe,
			u.RawQuery, "REDACTED", u.Query().Encode(), "REDACTED")
		if pw, ok := u.User.Password(); ok {
			pairs = append(pairs, pw, "REDACTED")
		}
	}
	for i := 0; i < len(pairs); i += 2 {
		if old := pairs[i]; old != "" && old != safe {
			msg = strings.ReplaceAll(msg, old, pairs[i+1])
		}
	}
	return &redactedError{msg: msg, err: err}
}

// redactedError is err with a message that hides what redactError hid.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
