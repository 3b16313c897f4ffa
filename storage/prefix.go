package storage

import (
	"context"
	"fmt"
	"io"
	"iter"
	"strings"
)

// Prefixed is a Bucket that confines another Bucket to the keys under a
// prefix. Keys given to it are relative to the prefix, and keys it returns
// are relative too, so a caller can neither see nor touch anything outside.
// It forwards the optional interfaces of its inner bucket, answering
// ErrUnsupported where the inner bucket lacks one.
type Prefixed struct {
	inner  Bucket
	prefix string // "" or ends in "/"
}

var (
	_ Bucket           = (*Prefixed)(nil)
	_ ExclusivePutter  = (*Prefixed)(nil)
	_ ExclusiveChecker = (*Prefixed)(nil)
	_ Locker           = (*Prefixed)(nil)
	_ LegalHolder      = (*Prefixed)(nil)
	_ UploadCleaner    = (*Prefixed)(nil)
)

// WithPrefix returns b confined to prefix. The prefix is a slash-separated
// path ("backups/seed-eu"); a trailing slash is added, so that prefix "a/b"
// never reaches "a/bc/...". An empty prefix returns a Prefixed that shows
// the whole bucket. The error matches ErrInvalidKey.
func WithPrefix(b Bucket, prefix string) (*Prefixed, error) {
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix != "" {
		if err := ValidateKey(prefix); err != nil {
			return nil, fmt.Errorf("prefix: %w", err)
		}
		prefix += "/"
	}
	return &Prefixed{inner: b, prefix: prefix}, nil
}

// Prefix returns the prefix with its trailing slash, or "".
func (p *Prefixed) Prefix() string { return p.prefix }

// Unwrap returns the inner bucket.
func (p *Prefixed) Unwrap() Bucket { return p.inner }

func (p *Prefixed) full(op, key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", &Error{Op: op, Key: key, Err: err}
	}
	return p.prefix + key, nil
}

// rel maps an error or info about a full key back to the relative key.
func (p *Prefixed) rel(err error) error {
	if e, ok := err.(*Error); ok && strings.HasPrefix(e.Key, p.prefix) {
		return &Error{Op: e.Op, Key: strings.TrimPrefix(e.Key, p.prefix), Err: e.Err}
	}
	return err
}

// Put implements Bucket.
func (p *Prefixed) Put(ctx context.Context, key string, r io.Reader, opts *PutOptions) error {
	full, err := p.full("put", key)
	if err != nil {
		return err
	}
	return p.rel(p.inner.Put(ctx, full, r, opts))
}

// Get implements Bucket.
func (p *Prefixed) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	full, err := p.full("get", key)
	if err != nil {
		return nil, err
	}
	rc, err := p.inner.Get(ctx, full)
	return rc, p.rel(err)
}

// Stat implements Bucket.
func (p *Prefixed) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	full, err := p.full("stat", key)
	if err != nil {
		return ObjectInfo{}, err
	}
	info, err := p.inner.Stat(ctx, full)
	if err != nil {
		return ObjectInfo{}, p.rel(err)
	}
	info.Key = key
	return info, nil
}

// List implements Bucket.
func (p *Prefixed) List(ctx context.Context, prefix string) iter.Seq2[ObjectInfo, error] {
	return func(yield func(ObjectInfo, error) bool) {
		if err := ValidatePrefix(prefix); err != nil {
			yield(ObjectInfo{}, &Error{Op: "list", Key: prefix, Err: err})
			return
		}
		for info, err := range p.inner.List(ctx, p.prefix+prefix) {
			if err != nil {
				yield(ObjectInfo{}, p.rel(err))
				return
			}
			rel, ok := strings.CutPrefix(info.Key, p.prefix)
			if !ok {
				continue // a backend that over-matches must not leak keys
			}
			info.Key = rel
			if !yield(info, nil) {
				return
			}
		}
	}
}

// Delete implements Bucket.
func (p *Prefixed) Delete(ctx context.Context, key string) error {
	full, err := p.full("delete", key)
	if err != nil {
		return err
	}
	return p.rel(p.inner.Delete(ctx, full))
}

// PutIfAbsent implements ExclusivePutter.
func (p *Prefixed) PutIfAbsent(ctx context.Context, key string, r io.Reader, opts *PutOptions) error {
	full, err := p.full("put", key)
	if err != nil {
		return err
	}
	ep, ok := p.inner.(ExclusivePutter)
	if !ok {
		return Errorf("put", key, ErrUnsupported, nil)
	}
	return p.rel(ep.PutIfAbsent(ctx, full, r, opts))
}

// Stage implements Stager through the inner bucket's, or fails with
// ErrUnsupported when it has none.
func (p *Prefixed) Stage(ctx context.Context, key string, r io.Reader, opts *PutOptions) (Staged, error) {
	full, err := p.full("put", key)
	if err != nil {
		return nil, err
	}
	st, ok := p.inner.(Stager)
	if !ok {
		return nil, Errorf("put", key, ErrUnsupported, nil)
	}
	s, err := st.Stage(ctx, full, r, opts)
	if err != nil {
		return nil, p.rel(err)
	}
	return prefixedStaged{s, p}, nil
}

// PutThenStage implements PairStager through the inner bucket's, or fails
// with ErrUnsupported when it has none.
func (p *Prefixed) PutThenStage(ctx context.Context, first, second StagePut) (Staged, error) {
	ps, ok := p.inner.(PairStager)
	if !ok {
		return nil, Errorf("put", first.Key, ErrUnsupported, nil)
	}
	var err error
	if first.Key, err = p.full("put", first.Key); err != nil {
		return nil, err
	}
	if second.Key, err = p.full("put", second.Key); err != nil {
		return nil, err
	}
	s, err := ps.PutThenStage(ctx, first, second)
	if err != nil {
		return nil, p.rel(err)
	}
	return prefixedStaged{s, p}, nil
}

// prefixedStaged reports a staged object's errors with keys relative to
// the prefix.
type prefixedStaged struct {
	Staged
	p *Prefixed
}

func (s prefixedStaged) Publish(ctx context.Context) error { return s.p.rel(s.Staged.Publish(ctx)) }

// CanPutIfAbsent implements ExclusiveChecker with the inner bucket's answer.
func (p *Prefixed) CanPutIfAbsent() bool { return CanPutIfAbsent(p.inner) }

// SetRetention implements Locker.
func (p *Prefixed) SetRetention(ctx context.Context, key string, r Retention) error {
	full, err := p.full("set retention", key)
	if err != nil {
		return err
	}
	l, ok := p.inner.(Locker)
	if !ok {
		return Errorf("set retention", key, ErrUnsupported, nil)
	}
	return p.rel(l.SetRetention(ctx, full, r))
}

// Retention implements Locker.
func (p *Prefixed) Retention(ctx context.Context, key string) (Retention, error) {
	full, err := p.full("retention", key)
	if err != nil {
		return Retention{}, err
	}
	l, ok := p.inner.(Locker)
	if !ok {
		return Retention{}, Errorf("retention", key, ErrUnsupported, nil)
	}
	r, err := l.Retention(ctx, full)
	return r, p.rel(err)
}

// LegalHold implements LegalHolder.
func (p *Prefixed) LegalHold(ctx context.Context, key string) (bool, error) {
	full, err := p.full("legal hold", key)
	if err != nil {
		return false, err
	}
	l, ok := p.inner.(LegalHolder)
	if !ok {
		return false, Errorf("legal hold", key, ErrUnsupported, nil)
	}
	held, err := l.LegalHold(ctx, full)
	return held, p.rel(err)
}

// IncompleteUploads implements UploadCleaner.
func (p *Prefixed) IncompleteUploads(ctx context.Context, prefix string) iter.Seq2[Upload, error] {
	return func(yield func(Upload, error) bool) {
		uc, ok := p.inner.(UploadCleaner)
		if !ok {
			yield(Upload{}, Errorf("list uploads", prefix, ErrUnsupported, nil))
			return
		}
		if err := ValidatePrefix(prefix); err != nil {
			yield(Upload{}, &Error{Op: "list uploads", Key: prefix, Err: err})
			return
		}
		for u, err := range uc.IncompleteUploads(ctx, p.prefix+prefix) {
			if err != nil {
				yield(Upload{}, p.rel(err))
				return
			}
			rel, ok := strings.CutPrefix(u.Key, p.prefix)
			if !ok {
				continue
			}
			u.Key = rel
			if !yield(u, nil) {
				return
			}
		}
	}
}

// AbortUpload implements UploadCleaner.
func (p *Prefixed) AbortUpload(ctx context.Context, u Upload) error {
	full, err := p.full("abort upload", u.Key)
	if err != nil {
		return err
	}
	uc, ok := p.inner.(UploadCleaner)
	if !ok {
		return Errorf("abort upload", u.Key, ErrUnsupported, nil)
	}
	u.Key = full
	return p.rel(uc.AbortUpload(ctx, u))
}
