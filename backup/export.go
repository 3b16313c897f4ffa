package backup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/etcdbackup/etcdbackup/internal/keypage"
)

// KeysExporter reads the keys under a set of prefixes from a live etcd at
// one revision and serves them as a keys-json object (see KeysJSONHeader).
// It is a Snapshotter, so that a logical backup goes through the same
// pipeline as a snapshot: compression, encryption, fan-out to several
// destinations, and a manifest as the commit point, with Request.Kind set
// to KindKeysJSON.
//
// The read is consistent: the first request fixes the revision, and every
// key after it is read at that revision, streamed by etcd in chunks of
// about its request size limit (RangeStream, etcd 3.7 and later) or, on
// older servers, page by page: at most PageSize keys and about PageBytes
// of keys and values a page (the limit of each request is sized from the
// keys read so far). Memory is bounded by a chunk and gRPC's flow-control
// window, or two pages, whatever the number of keys: a client made by
// clientv3.New is streamed from through its connection, and key lines are
// written from the buffers gRPC received a chunk in, not decoded first; a
// client whose KV its user set (a namespace, a proxy) is read through that
// KV, and holds three decoded chunks. A compaction past that revision
// while the export runs fails it with etcd's ErrCompacted.
type KeysExporter struct {
	// Client reads the keys. The exporter does not close it.
	Client *clientv3.Client
	// Prefixes are the key prefixes to export; none means every key.
	// Prefixes covered by another one are read once (NormalizePrefixes).
	Prefixes []string
	// PageSize is the most keys read per request. Zero means
	// DefaultExportPageSize.
	PageSize int64
	// PageBytes is the size of keys and values a request aims at. Zero
	// means DefaultExportPageBytes. Smaller pages hold less memory but
	// cost etcd more: a range request with a limit still counts every key
	// of its range.
	PageBytes int64
	// NoStream pages with Get even when etcd streams ranges (RangeStream,
	// etcd 3.7 and later), which costs etcd a count of the rest of the
	// range at every page: time quadratic in the number of keys. Past the
	// first page an export streams by default, and pages on a server
	// without RangeStream.
	NoStream bool
	// Kind is the object written: ManifestKindKeysJSON (the zero value)
	// or ManifestKindKeys, a keys zip (see KeysZipWriter). The pipeline's
	// Request.Kind says the same.
	Kind string
	// Now stamps the header; nil means time.Now.
	Now func() time.Time
}

var _ Snapshotter = (*KeysExporter)(nil)

// Defaults of a KeysExporter's pages.
const (
	DefaultExportPageSize  = 1000
	DefaultExportPageBytes = 4 << 20
)

// Snapshot implements Snapshotter. The stream is the keys-json object; it
// has no etcd trailer, so the raw SHA-256 the pipeline records is the
// object's own. The SnapshotInfo records the revision exactly (RevisionLow
// and RevisionHigh both) and, once the stream has ended, the number of
// keys.
func (e *KeysExporter) Snapshot(ctx context.Context) (*Snapshot, error) {
	if e.Client == nil {
		return nil, errors.New("keys exporter has no client")
	}
	if e.Kind != "" && !IsLogicalKind(e.Kind) {
		return nil, fmt.Errorf("keys exporter: %q is not a logical backup kind", e.Kind)
	}
	prefixes := NormalizePrefixes(e.Prefixes)
	first, err := e.page(ctx, rangeOf(prefixes, 0), 0, min(keypage.FirstKeys, e.pageSize()))
	if err != nil {
		return nil, fmt.Errorf("read keys: %w", err)
	}
	rev := first.Header.Revision
	info := SnapshotInfo{
		ClusterID:    first.Header.ClusterId,
		MemberID:     first.Header.MemberId,
		RevisionLow:  rev,
		RevisionHigh: rev,
		Started:      e.now(),
	}
	header := KeysJSONHeader{
		Format: KeysJSONFormat, Version: KeysJSONVersion, Revision: rev,
		Prefixes: prefixes, ClusterID: formatID(first.Header.ClusterId), Created: info.Started.UTC(),
	}
	if header.Prefixes == nil {
		header.Prefixes = []string{}
	}
	pr, pw := io.Pipe()
	var keys atomic.Int64
	ectx, cancel := context.WithCancel(ctx)
	go func(first *clientv3.GetResponse) { // an argument, so that no closure holds the page
		n, err := e.write(ectx, pw, header, prefixes, first)
		keys.Store(n)
		pw.CloseWithError(err)
	}(first)
	finish := func(info SnapshotInfo) (SnapshotInfo, error) {
		info.Keys = keys.Load() // stored before the pipe's end was read
		return info, nil
	}
	return NewLogicalSnapshot(&cancelOnClose{ReadCloser: pr, cancel: cancel}, info, finish), nil
}

// NewLogicalSnapshot is NewSnapshot for a stream that has no etcd trailer:
// a keys-json object, whose SHA-256 is computed as it is read and recorded
// as the raw digest. Its Snapshotter sets RevisionLow and RevisionHigh to
// the revision the keys were read at, and Keys (through finish) to their
// number.
func NewLogicalSnapshot(rc io.ReadCloser, info SnapshotInfo, finish FinishFunc) *Snapshot {
	s := NewSnapshot(rc, info, finish)
	s.tr.plain = true
	return s
}

func (e *KeysExporter) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// cancelOnClose ends the writing goroutine when the pipeline closes the
// stream early.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	c.cancel()
	return c.ReadCloser.Close()
}

// keyRange is the range of one prefix, or of every key.
type keyRange struct{ key, end string }

// rangeOf returns the range of prefixes[i], or of the whole keyspace when
// there are no prefixes.
func rangeOf(prefixes []string, i int) keyRange {
	if len(prefixes) == 0 {
		return keyRange{key: "\x00", end: "\x00"}
	}
	return keyRange{key: prefixes[i], end: clientv3.GetPrefixRangeEnd(prefixes[i])}
}

func (e *KeysExporter) pageSize() int64 {
	if e.PageSize <= 0 {
		return DefaultExportPageSize
	}
	return e.PageSize
}

func (e *KeysExporter) page(ctx context.Context, r keyRange, rev, limit int64) (*clientv3.GetResponse, error) {
	opts := []clientv3.OpOption{clientv3.WithRange(r.end), clientv3.WithLimit(limit),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	return e.Client.Get(ctx, r.key, opts...)
}

// write writes the object to w: the header, then every key of every
// range at the first page's revision, as read chunk by chunk or page by
// page. Reading and writing overlap without a stage of their own: etcd
// sends the next chunk of a stream while one is written, and pages read
// the next page while one is written (see pages). At most a chunk and
// gRPC's window, or two pages, are held, whatever the number of keys.
func (e *KeysExporter) write(ctx context.Context, w io.Writer, h KeysJSONHeader, prefixes []string, first *clientv3.GetResponse) (int64, error) {
	kw, err := NewKeyWriter(w, e.Kind, h)
	if err != nil {
		return 0, err
	}
	if z, ok := kw.(*KeysZipWriter); ok {
		defer z.Discard() // its temporary files, whether or not it was closed
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var writeErr error
	emit := func(kv KeyValue) error {
		writeErr = kw.Write(kv)
		return writeErr
	}
	if err := e.read(ctx, h.Revision, prefixes, first, emit); err != nil {
		if writeErr != nil {
			return kw.Keys(), writeErr
		}
		return kw.Keys(), fmt.Errorf("read keys: %w", err)
	}
	return kw.Keys(), kw.Close()
}

// emitPage passes the keys of a page to emit.
func emitPage(resp *clientv3.GetResponse, emit func(KeyValue) error) error {
	for _, kv := range resp.Kvs {
		if err := emit(KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision,
			Version: kv.Version, Value: kv.Value, Lease: kv.Lease}); err != nil {
			return err
		}
	}
	return nil
}

// read passes every key of every range to emit, the first page's first.
// Past the first page it streams each range from etcd (RangeStream, etcd
// 3.7 and later: chunks the server sizes, no count of the rest of the
// range per chunk), or pages through it with Get on a server without it.
// A client whose KV is its own is streamed from through its connection
// (streamConn); one whose KV was set by its user, through that KV.
func (e *KeysExporter) read(ctx context.Context, rev int64, prefixes []string, first *clientv3.GetResponse, emit func(KeyValue) error) error {
	pg := &keypage.Pager{MaxKeys: e.pageSize(), Target: cmp.Or(e.PageBytes, DefaultExportPageBytes)}
	pg.Saw(first)
	stream, streamRange := !e.NoStream, e.stream
	if readsConn(e.Client) {
		streamRange = e.streamConn
	}
	ranges := max(len(prefixes), 1)
	for i := range ranges {
		r := rangeOf(prefixes, i)
		if i == 0 {
			if err := emitPage(first, emit); err != nil {
				return err
			}
			if !first.More || len(first.Kvs) == 0 {
				first = nil
				continue
			}
			r.key = string(first.Kvs[len(first.Kvs)-1].Key) + "\x00"
			first = nil // not held past its page
		}
		if stream {
			streamed, err := streamRange(ctx, r, rev, emit)
			if err != nil {
				return err
			}
			if streamed {
				continue
			}
			stream = false // etcd has no RangeStream: page from here on
		}
		if err := e.pages(ctx, r, rev, pg, emit); err != nil {
			return err
		}
	}
	return nil
}

// stream sends the keys of r at rev, chunk by chunk, as etcd streams them
// through the client's KV. It reports false, having sent nothing, when
// etcd does not know RangeStream.
func (e *KeysExporter) stream(ctx context.Context, r keyRange, rev int64, emit func(KeyValue) error) (bool, error) {
	sctx, cancel := context.WithCancel(ctx)
	chunks, err := e.Client.GetStream(sctx, r.key, clientv3.WithRange(r.end), clientv3.WithRev(rev))
	defer func() {
		cancel()
		drain(chunks)
	}()
	received := false
	for err == nil {
		c, ok := <-chunks
		if !ok {
			return true, nil
		}
		if err = c.Err(); err != nil {
			break
		}
		received = true
		if err = emitPage(&clientv3.GetResponse{Kvs: c.Kvs}, emit); err != nil {
			return true, err
		}
	}
	if !received && status.Code(err) == codes.Unimplemented {
		return false, nil
	}
	return true, err
}

// drain reads a stream's channel to its end, so that the client's
// goroutine feeding it can end; a nil channel is no stream.
func drain(chunks clientv3.GetStreamChan) {
	if chunks == nil {
		return
	}
	for range chunks {
	}
}

// pages sends the keys of r at rev page by page, with Get: the next page
// is read while one is sent, so that etcd's work and the encoding overlap
// and at most two pages are held.
func (e *KeysExporter) pages(ctx context.Context, r keyRange, rev int64, pg *keypage.Pager, emit func(KeyValue) error) error {
	type page struct {
		resp *clientv3.GetResponse
		err  error
	}
	fetch := func(key string) <-chan page {
		c := make(chan page, 1) // the reader ends whether or not its page is taken
		kr, limit := keyRange{key: key, end: r.end}, pg.Limit()
		go func() {
			resp, err := e.page(ctx, kr, rev, limit)
			c <- page{resp, err}
		}()
		return c
	}
	next := fetch(r.key)
	for {
		var p page
		select {
		case p = <-next:
		case <-ctx.Done():
			return ctx.Err()
		}
		if p.err != nil {
			return p.err
		}
		pg.Saw(p.resp)
		more := p.resp.More && len(p.resp.Kvs) > 0
		if more {
			next = fetch(string(p.resp.Kvs[len(p.resp.Kvs)-1].Key) + "\x00")
		}
		if err := emitPage(p.resp, emit); err != nil || !more {
			return err
		}
	}
}
