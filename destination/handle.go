package destination

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"sync"

	"github.com/minio/minio-go/v7"
	"gocloud.dev/blob/memblob"

	"github.com/etcdbackup/etcdbackup/storage"
	"github.com/etcdbackup/etcdbackup/storage/blob"
	"github.com/etcdbackup/etcdbackup/storage/s3"
)

// handle is one opened client of a destination: its bucket confined to the
// prefix, and what closing it takes. A credential rotation or a move
// replaces a destination's handle; operations that started on the old one
// hold a reference and finish on it, and the old handle closes once the
// last of them is done.
type handle struct {
	loc    Location
	bucket *storage.Prefixed
	// probe is the bucket availability checks list: for s3 a client that
	// does not retry, so that a stopped store shows as unreachable at once
	// instead of after minio-go's backoff.
	probe storage.Bucket
	// precheck runs before probes and syncs: for file locations, whose
	// driver lists a missing or unreadable directory as empty, it checks
	// the directory itself.
	precheck func() error
	closer   func()

	mu      sync.Mutex
	refs    int
	retired bool
	closed  bool
}

// acquire takes a reference. The caller holds the destination's lock, so
// that the handle cannot be retired in between.
func (h *handle) acquire() {
	h.mu.Lock()
	h.refs++
	h.mu.Unlock()
}

// release drops a reference and closes a retired handle with none left.
func (h *handle) release() {
	h.mu.Lock()
	h.refs--
	closeNow := h.retired && h.refs == 0 && !h.closed
	if closeNow {
		h.closed = true
	}
	h.mu.Unlock()
	if closeNow && h.closer != nil {
		h.closer()
	}
}

// retire marks the handle replaced; it closes now or at its last release.
func (h *handle) retire() {
	h.mu.Lock()
	h.retired = true
	closeNow := h.refs == 0 && !h.closed
	if closeNow {
		h.closed = true
	}
	h.mu.Unlock()
	if closeNow && h.closer != nil {
		h.closer()
	}
}

// open opens the store of spec at loc.
func (r *Registry) open(ctx context.Context, spec Spec, loc Location) (*handle, error) {
	var (
		inner, probe storage.Bucket
		closer       func()
	)
	switch {
	case loc.Scheme == "":
		return nil, fmt.Errorf("destination %s: %w: give it a URL to make it available", quote(spec.Name), ErrNotConfigured)
	case r.opts.Schemes[loc.Scheme] != nil:
		b, err := r.opts.Schemes[loc.Scheme](ctx, loc)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", loc.Scheme, err)
		}
		inner, probe = b, b
		if c, ok := b.(io.Closer); ok {
			closer = func() { _ = c.Close() }
		}
	case loc.Scheme == SchemeS3:
		creds, err := spec.Credentials.resolve(ctx, spec.Name, r.opts.Secrets, r.opts.CredentialSources)
		if err != nil {
			return nil, err
		}
		tr, err := minio.DefaultTransport(!loc.Insecure)
		if err != nil {
			return nil, fmt.Errorf("s3 transport: %w", err)
		}
		if err := s3.TrustCAs(tr, []byte(spec.CACertPEM), spec.CACertFile); err != nil {
			return nil, &SpecError{Name: spec.Name, Field: "ca certificates", Err: err}
		}
		o := s3.Options{
			Endpoint:      loc.Endpoint,
			Bucket:        loc.Bucket,
			Region:        loc.Region,
			Insecure:      loc.Insecure,
			Credentials:   creds,
			Encryption:    spec.Encryption,
			PartSize:      r.opts.PartSize,
			PartsInFlight: r.opts.PartsInFlight,
			AdaptiveParts: r.opts.AdaptiveParts || loc.AdaptiveParts,
			Transport:     tr,
			Logger:        r.log.With("destination", spec.Name),
		}
		if loc.PathStyle {
			o.BucketLookup = s3.LookupPath
		}
		if o.Region == "" {
			if o.Region, err = spec.Credentials.awsRegion(r.opts.CredentialSources); err != nil {
				return nil, err
			}
		}
		b, err := s3.New(o)
		if err != nil {
			return nil, err
		}
		o.MaxRetries = 1
		p, err := s3.New(o)
		if err != nil {
			return nil, err
		}
		inner, probe, closer = b, p, tr.CloseIdleConnections
	case (loc.Scheme == SchemeGCS || loc.Scheme == SchemeAzure) && spec.Credentials != (Credentials{}):
		b, closeKey, err := r.openKey(ctx, spec, loc)
		if err != nil {
			return nil, err
		}
		inner, probe, closer = b, b, closeKey
	case loc.Scheme == SchemeMem && r.opts.Mux == nil:
		inner = r.memBucket(loc.Bucket)
		probe = inner
	default:
		if err := r.checkDriver(spec, loc); err != nil {
			return nil, err
		}
		opts := &blob.Options{Logger: r.log.With("destination", spec.Name)}
		if d, ok := r.driver(loc.Scheme); ok {
			opts.ErrorCode = d.ErrorCode
		}
		b, err := blob.Open(ctx, r.mux, loc.gocloudURL(), opts)
		if err != nil {
			return nil, err
		}
		inner, probe, closer = b, b, func() { _ = b.Close() }
	}
	bucket, err := storage.WithPrefix(inner, loc.Prefix)
	if err != nil {
		if closer != nil {
			closer()
		}
		return nil, err
	}
	probeBucket, err := storage.WithPrefix(probe, loc.Prefix)
	if err != nil {
		if closer != nil {
			closer()
		}
		return nil, err
	}
	h := &handle{loc: loc, bucket: bucket, probe: probeBucket, closer: closer}
	if loc.Scheme == SchemeFile {
		h.precheck = func() error { return checkDir(loc.Dir) }
	}
	return h, nil
}

// checkDir reports a directory that is missing (fs.ErrNotExist), not a
// directory, or that cannot be read (fs.ErrPermission).
func checkDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory: %w", dir, fs.ErrNotExist)
	}
	if _, err := f.ReadDir(1); err != nil && err != io.EOF {
		return err
	}
	return nil
}

// memBucket returns the registry's in-memory bucket of that name, so that
// mem://name means the same bucket for as long as the registry lives,
// across updates.
func (r *Registry) memBucket(name string) storage.Bucket {
	r.memMu.Lock()
	defer r.memMu.Unlock()
	if b, ok := r.mem[name]; ok {
		return b
	}
	gb := memblob.OpenBucket(nil)
	b := blob.New(gb, nil)
	r.mem[name] = b
	r.memClose = append(r.memClose, func() { _ = gb.Close() })
	return b
}

// releasingReader releases its handle when closed.
type releasingReader struct {
	io.ReadCloser
	h    *handle
	once sync.Once
}

func (r *releasingReader) Close() error {
	err := r.ReadCloser.Close()
	r.once.Do(r.h.release)
	return err
}

// listOn lists prefix on the bucket chosen by get, holding the handle for
// the whole iteration.
func listOn[T any](acquire func() (*handle, error), list func(h *handle) iter.Seq2[T, error]) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		h, err := acquire()
		if err != nil {
			var zero T
			yield(zero, err)
			return
		}
		defer h.release()
		for v, err := range list(h) {
			if !yield(v, err) {
				return
			}
		}
	}
}
