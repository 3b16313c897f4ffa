package restore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/etcdbackup/etcdbackup/backup"
)

// ImportMode says what an import does with a key that exists already.
type ImportMode string

// The import modes.
const (
	// CreateOnly writes only keys that do not exist; an existing key with
	// another value is left alone and counted as Conflicts.
	CreateOnly ImportMode = "create-only"
	// Overwrite writes every key whose value differs.
	Overwrite ImportMode = "overwrite"
)

// LeasePolicy says what an import does with a key that had a lease in the
// source cluster. Its lease is of that cluster and cannot come along: the
// key would otherwise become permanent (an apiserver's master lease, an
// Event, a lock held forever).
type LeasePolicy string

// The lease policies.
const (
	// SkipLeased (the zero value) imports no key that had a lease; they
	// are counted as ImportResult.Leased, and DeleteMissing leaves the
	// target's keys of the same name alone, and so every key of the
	// target that has a lease (ImportResult.KeptLeased).
	SkipLeased LeasePolicy = "skip"
	// WithoutLease imports them as keys without a lease, which never
	// expire.
	WithoutLease LeasePolicy = "without-lease"
)

// ErrImport matches errors about an import that may not run as asked: an
// unknown mode, or DeleteMissing without the prefixes that bound it.
var ErrImport = errors.New("invalid import")

// Importer writes a logical backup, a keys-json object (see
// backup.KeysJSONHeader) or a keys zip (see backup.KeysZipWriter), into a
// live etcd through its client, in transactions of BatchSize keys.
//
// Nothing is written before the whole object has been read and checked: a
// bad header, a truncated or overlong line, invalid base64, a key outside
// the object's prefixes or a missing or wrong end line fails the import
// with an error matching backup.ErrKeysJSON, and etcd is untouched. Keys
// with a lease in the source are skipped (Leases): their lease belongs to
// the source cluster. An overwritten key keeps the target's own lease.
//
// An import never touches a key outside the prefixes the object covers:
// Mapping.Prefixes narrow them, and a prefix outside them fails with
// ErrScope (see KeyMapping.Scope).
//
// Each write is conditional on what the importer read: a key created or
// changed by someone else between the read and the write is read again, so
// CreateOnly never overwrites and DeleteMissing never deletes a key it did
// not see.
type Importer struct {
	// Client writes the keys. The importer does not close it.
	Client *clientv3.Client
	// Mode is CreateOnly (the zero value) or Overwrite.
	Mode ImportMode
	// DryRun counts what the import would change and changes nothing.
	DryRun bool
	// Mapping selects and renames the object's keys.
	Mapping KeyMapping
	// Leases is what becomes of keys that had a lease: SkipLeased (the
	// zero value) or WithoutLease.
	Leases LeasePolicy
	// DeleteMissing deletes, under the prefixes the imported keys land in
	// (KeyMapping.Scope), every key the object does not hold. It needs
	// prefixes in the object's header or Mapping.Prefixes: it never deletes
	// the whole keyspace. It needs an object that proves it is complete
	// too (ImportResult.Complete): a version 1 object is refused unless
	// ManifestChecked.
	DeleteMissing bool
	// ManifestChecked says the object's size and sha256 were compared with
	// its manifest (FetchResult.ManifestChecked), which proves a version 1
	// object complete.
	ManifestChecked bool
	// MaxBytes bounds the object Import copies from its reader; zero means
	// DefaultImportMaxBytes. A larger object fails with ErrImport before
	// anything is written.
	MaxBytes int64
	// MaxRequestBytes is the target's --max-request-bytes; zero means
	// etcd's default, 1.5 MiB. A key whose key and value do not fit in a
	// request fails the import with ErrImport before anything is written,
	// rather than part-way.
	MaxRequestBytes int
	// BatchSize is the number of keys per transaction. Zero means 64; etcd
	// allows 128 operations per transaction by default.
	BatchSize int
	// TempDir holds the copy of the object that Import reads twice. Empty
	// means os.TempDir().
	TempDir string
	// Examples is how many changes ImportResult.Changes keeps. Zero means 20.
	Examples int
	// Logger receives progress; nil is silent.
	Logger *slog.Logger
}

// ImportResult counts what an import changed, or would change.
type ImportResult struct {
	// Revision is the revision the object was read at.
	Revision int64
	// Keys is how many keys the mapping selected.
	Keys int64
	// Created, Overwritten and Deleted count the keys written and deleted;
	// Unchanged those that already held the value; Conflicts the existing
	// keys with another value that CreateOnly left alone.
	Created, Overwritten, Unchanged, Conflicts, Deleted int64
	DryRun                                              bool
	// Leased counts the keys of the object that had a lease, and Leases
	// says what was done with them.
	Leased int64
	Leases LeasePolicy
	// KeptLeased counts the keys of the target with a lease that the
	// object does not hold, which delete-missing left alone under
	// SkipLeased: a lease marks a key that a live client keeps (an
	// apiserver's master lease, a held election or lock).
	KeptLeased int64 `json:",omitempty"`
	// Complete reports whether the object proved it holds every key it was
	// written with: its end line matched, or its manifest was checked
	// (Importer.ManifestChecked). A version 1 object read from a stream
	// without its manifest cannot: keys after a cut would be missing.
	Complete bool
	// Changes are the first changes, in key order.
	Changes []KeyChange
	// NotWritten is, after an import that failed part-way, the first key
	// whose change was not committed: every change before it in key order
	// was (the counts above), none from it on (but see MayBeWritten). It
	// is set on every error after the first write: a failed write, a
	// failed read of the target, a canceled context. Nil when the import
	// ended, or failed before its first write.
	NotWritten []byte `json:",omitempty"`
	// MayBeWritten reports that the write of the batch from NotWritten on
	// failed in a way that does not say whether etcd committed it (a
	// deadline, a lost connection): those keys may or may not be written.
	MayBeWritten bool `json:",omitempty"`
}

// Written returns how many keys the import created, overwrote or deleted.
func (r *ImportResult) Written() int64 { return r.Created + r.Overwritten + r.Deleted }

// DefaultImportMaxBytes is the largest object Import copies when
// Importer.MaxBytes is zero: far above etcd's largest database (8 GiB
// recommended) written as base64 lines.
const DefaultImportMaxBytes int64 = 16 << 30

// Import reads a keys-json object from r, checks all of it, then writes
// it. r is copied to a file of mode 0600 under TempDir, so that it can be
// read twice; ImportFile reads a file in place.
func (im *Importer) Import(ctx context.Context, r io.Reader) (*ImportResult, error) {
	f, err := os.CreateTemp(im.TempDir, "etcdbackup-import-*")
	if err != nil {
		return nil, fmt.Errorf("create import file: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	limit := cmp.Or(im.MaxBytes, DefaultImportMaxBytes)
	n, err := io.Copy(f, io.LimitReader(contextReader{ctx, r}, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read keys-json: %w", err)
	}
	if n > limit {
		return nil, fmt.Errorf("%w: the object is larger than %d bytes (Importer.MaxBytes)", ErrImport, limit)
	}
	return im.ImportFile(ctx, f.Name())
}

// ImportFile is Import of the object in the file at path: keys-json or a
// keys zip (see backup.KeysZipWriter), told apart by its first bytes. A
// keys zip is read in place (its directory is at its end);
// Import spools a stream to a file first, bounded by MaxBytes, and a keys
// zip decoding to more than MaxBytes is refused too. Either is checked
// whole, every value read and its CRC checked, before anything is written:
// a file the index does not name or that it names otherwise (a path such
// as "../x", a duplicate, a missing or extra file), a value or archive
// larger than the bounds, or an archive whose directory is cut fails with
// an error matching backup.ErrKeysZip and backup.ErrKeysJSON.
func (im *Importer) ImportFile(ctx context.Context, path string) (*ImportResult, error) {
	if err := im.validate(); err != nil {
		return nil, err
	}
	header, complete, err := im.check(ctx, path)
	if err != nil {
		return nil, err
	}
	res := &ImportResult{Revision: header.Revision, DryRun: im.DryRun, Complete: complete || im.ManifestChecked, Leases: im.leases()}
	targets, err := im.Mapping.Scope(header.Prefixes)
	if err != nil {
		return nil, err
	}
	if im.DeleteMissing && len(targets) == 0 {
		return nil, fmt.Errorf("%w: delete-missing needs prefixes: the object holds the whole keyspace", ErrImport)
	}
	if im.DeleteMissing && !res.Complete {
		return nil, fmt.Errorf("%w: delete-missing needs an object that proves it is complete: a version %d object without its manifest may have been cut short", ErrImport, header.Version)
	}
	if !res.Complete {
		im.logger().Warn("the object cannot prove it is complete: keys after a cut would be missing", "version", header.Version)
	}
	src, _, c, err := OpenKeysFile(path, im.Mapping, im.MaxBytes)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	a := &applier{ctx: ctx, im: im, res: res, deleting: im.DeleteMissing}
	if err := mergeKeys(ctx, src, NewEtcdKeys(im.Client, targets), a.add); err != nil {
		a.stopped()
		return res, err
	}
	if err := a.flush(ctx); err != nil {
		return res, err
	}
	im.logger().Info("import done", "revision", res.Revision, "keys", res.Keys, "created", res.Created,
		"overwritten", res.Overwritten, "unchanged", res.Unchanged, "conflicts", res.Conflicts, "deleted", res.Deleted, "dry_run", im.DryRun)
	return res, nil
}

func (im *Importer) validate() error {
	switch {
	case im.Client == nil:
		return fmt.Errorf("%w: no client", ErrImport)
	case im.Mode != "" && im.Mode != CreateOnly && im.Mode != Overwrite:
		return fmt.Errorf("%w: unknown mode %q (want %s or %s)", ErrImport, im.Mode, CreateOnly, Overwrite)
	case im.Leases != "" && im.Leases != SkipLeased && im.Leases != WithoutLease:
		return fmt.Errorf("%w: unknown lease policy %q (want %s or %s)", ErrImport, im.Leases, SkipLeased, WithoutLease)
	case im.BatchSize < 0 || im.BatchSize > 1024:
		return fmt.Errorf("%w: batch size %d is outside [1, 1024]", ErrImport, im.BatchSize)
	}
	return nil
}

// check reads the whole object once, through the mapping, so that a
// broken object fails before anything is written. complete says its end
// line proved it complete.
func (im *Importer) check(ctx context.Context, path string) (_ *backup.KeysJSONHeader, complete bool, _ error) {
	kr, c, err := openKeyFile(path, im.MaxBytes)
	if err != nil {
		return nil, false, err
	}
	defer c.Close()
	header := kr.Header()
	src := &mappedKeys{r: kr, m: im.Mapping}
	limit := im.maxRequestBytes()
	for {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		kv, err := src.Next(ctx)
		if err == io.EOF {
			return &header, kr.Complete(), nil
		} else if err != nil {
			return nil, false, err
		}
		if n := len(kv.Key) + len(kv.Value) + requestOverhead; n > limit {
			return nil, false, fmt.Errorf("%w: key %q and its value need a request of %d bytes, more than the target's limit of %d (Importer.MaxRequestBytes)", ErrImport, kv.Key, n, limit)
		}
	}
}

// requestOverhead is what a put request of one key adds to its key and
// value, in a transaction with its condition: generously rounded up.
const requestOverhead = 512

// DefaultMaxRequestBytes is etcd's default --max-request-bytes.
const DefaultMaxRequestBytes = 1536 * 1024

func (im *Importer) maxRequestBytes() int {
	if im.MaxRequestBytes > 0 {
		return im.MaxRequestBytes
	}
	return DefaultMaxRequestBytes
}

func (im *Importer) leases() LeasePolicy {
	if im.Leases == "" {
		return SkipLeased
	}
	return im.Leases
}

func (im *Importer) logger() *slog.Logger {
	if im.Logger != nil {
		return im.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// applier collects the merge of the object with the target's keys into
// conditional transactions.
type applier struct {
	ctx      context.Context
	im       *Importer
	res      *ImportResult
	deleting bool
	ops      []clientv3.Op
	conds    []clientv3.Cmp
	pending  []pendingChange
	bytes    int // of the keys and values queued
	// lastWritten is the last key of the last batch committed.
	lastWritten []byte
}

// maxBatchBytes bounds the keys and values of one transaction, below
// etcd's default request limit of 1.5 MiB; a larger key goes alone.
const maxBatchBytes = 1 << 20

type pendingChange struct {
	kind   *int64
	change KeyChange
}

// add takes one key of the merge: x from the object, y from the target.
func (a *applier) add(x, y *backup.KeyValue) error {
	if x != nil {
		a.res.Keys++
		if x.Lease != 0 {
			a.res.Leased++
			if a.res.Leases == SkipLeased {
				return nil
			}
		}
	}
	var err error
	switch {
	case x == nil && !a.deleting:
		return nil
	case x == nil && y.Lease != 0 && a.res.Leases == SkipLeased:
		a.res.KeptLeased++
		return nil
	case x == nil:
		err = a.queue(&a.res.Deleted, KeyChange{Op: "removed", Key: y.Key, Old: y},
			clientv3.Compare(clientv3.ModRevision(string(y.Key)), "=", y.ModRevision), clientv3.OpDelete(string(y.Key)))
	case y == nil:
		err = a.queue(&a.res.Created, KeyChange{Op: "added", Key: x.Key, New: x},
			clientv3.Compare(clientv3.CreateRevision(string(x.Key)), "=", 0), clientv3.OpPut(string(x.Key), string(x.Value)))
	case bytes.Equal(x.Value, y.Value):
		a.res.Unchanged++
	case a.im.Mode == Overwrite:
		var opts []clientv3.OpOption
		if y.Lease != 0 {
			opts = append(opts, clientv3.WithIgnoreLease()) // the target's own lease stays
		}
		err = a.queue(&a.res.Overwritten, KeyChange{Op: "changed", Key: x.Key, Old: y, New: x},
			clientv3.Compare(clientv3.ModRevision(string(y.Key)), "=", y.ModRevision), clientv3.OpPut(string(x.Key), string(x.Value), opts...))
	default:
		a.res.Conflicts++
	}
	if err != nil {
		return err
	}
	if len(a.ops) >= a.batch() || a.bytes >= a.batchBytes() {
		return a.flush(a.ctx)
	}
	return nil
}

// batchBytes bounds the keys and values of one transaction: within the
// target's request limit.
func (a *applier) batchBytes() int {
	return min(maxBatchBytes, a.im.maxRequestBytes())
}

func (a *applier) batch() int {
	if a.im.BatchSize > 0 {
		return a.im.BatchSize
	}
	return 64
}

func (a *applier) queue(count *int64, c KeyChange, cond clientv3.Cmp, op clientv3.Op) error {
	if a.bytes > 0 && c.New != nil && a.bytes+len(c.Key)+len(c.New.Value)+requestOverhead*(len(a.ops)+1) > a.batchBytes() {
		if err := a.flush(a.ctx); err != nil {
			return err
		}
	}
	a.bytes += len(c.Key)
	if c.New != nil {
		a.bytes += len(c.New.Value)
	}
	a.conds = append(a.conds, cond)
	a.ops = append(a.ops, op)
	a.pending = append(a.pending, pendingChange{kind: count, change: c})
	return nil
}

// stopped records, when the import stops on an error other than a failed
// write after it committed a batch, where it stopped: the first key queued
// and not written, or the first key after the last one written.
func (a *applier) stopped() {
	if a.res.NotWritten != nil || a.lastWritten == nil {
		return
	}
	if len(a.pending) > 0 {
		a.res.NotWritten = a.pending[0].change.Key
		return
	}
	a.res.NotWritten = append(append([]byte{}, a.lastWritten...), 0)
}

// ambiguous reports whether a failed write may have been committed all
// the same: its deadline passed, it was canceled or the connection was
// lost after it was sent.
func ambiguous(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Canceled, codes.Unavailable, codes.Unknown:
		return true
	}
	return false
}

// flush commits the queued writes in one transaction, conditional on what
// was read. A failed condition means someone changed a key meanwhile: the
// import stops with ErrConflict rather than guess.
func (a *applier) flush(ctx context.Context) error {
	if len(a.ops) == 0 {
		return nil
	}
	if !a.im.DryRun {
		resp, err := a.im.Client.Txn(ctx).If(a.conds...).Then(a.ops...).Commit()
		if err != nil && ambiguous(err) {
			a.res.NotWritten, a.res.MayBeWritten = a.pending[0].change.Key, true
			return fmt.Errorf("write keys from %q on: the %d keys of this batch may or may not be written, the %d keys written before them stay: %w", a.pending[0].change.Key, len(a.pending), a.res.Written(), err)
		}
		if err != nil {
			a.res.NotWritten = a.pending[0].change.Key
			return fmt.Errorf("write keys from %q on (%d keys written before them stay): %w", a.pending[0].change.Key, a.res.Written(), err)
		}
		if !resp.Succeeded {
			a.res.NotWritten = a.pending[0].change.Key
			return fmt.Errorf("%w: a key among the %d from %q on was changed while the import ran; none of them was written, the %d keys written before them stay", ErrConflict, len(a.pending), a.pending[0].change.Key, a.res.Written())
		}
	}
	limit := a.im.Examples
	if limit == 0 {
		limit = 20
	}
	for _, p := range a.pending {
		*p.kind++
		if len(a.res.Changes) < limit {
			a.res.Changes = append(a.res.Changes, p.change)
		}
	}
	if !a.im.DryRun {
		a.lastWritten = append(a.lastWritten[:0], a.pending[len(a.pending)-1].change.Key...)
	}
	a.ops, a.conds, a.pending, a.bytes = a.ops[:0], a.conds[:0], a.pending[:0], 0
	return nil
}

// ErrConflict is returned when a key the import was about to write or
// delete changed while the import ran. What earlier batches wrote stays.
var ErrConflict = errors.New("concurrent change")

// contextReader stops reading once ctx ends.
type contextReader struct {
	ctx context.Context
	r   io.Reader
}

func (c contextReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
