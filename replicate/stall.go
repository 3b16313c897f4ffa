package replicate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/storage"
)

// listBackups lists cluster's backups on cat, as backup.ListBackups does,
// failing with an error matching backup.ErrDestinationStalled when no
// object listed and no byte of a manifest read came for stall (zero: no
// bound): a store that stopped answering ends the listing, not the copy's
// caller's patience.
func listBackups(ctx context.Context, cat backup.Catalog, cluster string, stall time.Duration) ([]backup.Entry, error) {
	if stall <= 0 {
		return backup.ListBackups(ctx, cat, cluster)
	}
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t := time.AfterFunc(stall, func() {
		cancel(fmt.Errorf("%w: nothing listed or read for %s", backup.ErrDestinationStalled, stall))
	})
	defer t.Stop()
	entries, err := backup.ListBackups(lctx, &stallCatalog{Catalog: cat, step: func() { t.Reset(stall) }}, cluster)
	if cause := context.Cause(lctx); err != nil && ctx.Err() == nil && errors.Is(cause, backup.ErrDestinationStalled) {
		return nil, cause
	}
	return entries, err
}

// timedCatalog records the modification times its catalog's listing
// gives, by key: the source's store's times, which a copy records
// (backup.Manifest.SourceStored).
type timedCatalog struct {
	backup.Catalog
	times map[string]time.Time
}

func (c *timedCatalog) List(ctx context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error] {
	return func(yield func(storage.ObjectInfo, error) bool) {
		for info, err := range c.Catalog.List(ctx, prefix) {
			if err == nil && !info.ModTime.IsZero() {
				c.times[info.Key] = info.ModTime
			}
			if !yield(info, err) {
				return
			}
		}
	}
}

// stallCatalog calls step whenever its catalog lists an object or reads
// some bytes.
type stallCatalog struct {
	backup.Catalog
	step func()
}

func (c *stallCatalog) List(ctx context.Context, prefix string) iter.Seq2[storage.ObjectInfo, error] {
	return func(yield func(storage.ObjectInfo, error) bool) {
		for info, err := range c.Catalog.List(ctx, prefix) {
			c.step()
			if !yield(info, err) {
				return
			}
		}
	}
}

func (c *stallCatalog) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := c.Catalog.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	c.step()
	return &stepReader{ReadCloser: rc, step: func(n int, _ error) {
		if n > 0 {
			c.step()
		}
	}}, nil
}

// stepReader calls step after every read.
type stepReader struct {
	io.ReadCloser
	step func(n int, err error)
}

func (r *stepReader) Read(b []byte) (int, error) {
	n, err := r.ReadCloser.Read(b)
	r.step(n, err)
	return n, err
}

// readManifest reads and parses the manifest at key on cat, the read
// bounded by the copier's StallTimeout as a transfer is. Errors of the
// read are returned as they are (storage.ErrNotFound, a parse error).
func (r *copyRun) readManifest(cat backup.Catalog, key string, parse func(io.Reader) (*backup.Manifest, error)) (*backup.Manifest, error) {
	ctx, stalled := r.watchdog()
	defer stalled.release()
	rc, err := cat.Get(ctx, key)
	var m *backup.Manifest
	if err == nil {
		defer rc.Close()
		m, err = parse(&stepReader{ReadCloser: rc, step: stalled.step})
	}
	if cause := context.Cause(ctx); err != nil && r.ctx.Err() == nil && errors.Is(cause, backup.ErrDestinationStalled) {
		return nil, cause
	}
	return m, err
}

// request returns the context of one request to the target (a Stat, a
// manifest's commit, a lock's read or write), cancelled when it takes
// longer than the copier's StallTimeout (zero: no bound), and the function
// the caller passes the request's error to once it returned: it ends the
// context and returns the error to report, matching
// backup.ErrDestinationStalled when the bound ended the request.
func (r *copyRun) request() (context.Context, func(error) error) {
	d := r.c.StallTimeout
	if d <= 0 {
		return r.ctx, func(err error) error { return err }
	}
	ctx, cancel := context.WithCancelCause(r.ctx)
	t := time.AfterFunc(d, func() {
		cancel(fmt.Errorf("%w: the target did not answer for %s", backup.ErrDestinationStalled, d))
	})
	return ctx, func(err error) error {
		t.Stop()
		defer cancel(nil)
		if cause := context.Cause(ctx); err != nil && r.ctx.Err() == nil && errors.Is(cause, backup.ErrDestinationStalled) {
			return fmt.Errorf("%w (%w)", cause, err)
		}
		return err
	}
}
