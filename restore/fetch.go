package restore

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"filippo.io/age"

	"github.com/etcdbackup/etcdbackup/backup"
)

// Restorer fetches backups from their sources and restores etcd member data
// directories from them. The zero value is ready to use for backups that
// are not encrypted. A Restorer may be used from several goroutines.
type Restorer struct {
	// Identities decrypt encrypted backups: any identity whose recipient
	// the backup was encrypted to will do. They appear in no error, log or
	// event.
	Identities []age.Identity
	// Observer receives the events of every fetch and restore; nil means
	// none.
	Observer Observer
	// Job names the host's job in every event (Event.Job): a host that
	// restores for an object of its own gives each restore a copy of its
	// Restorer with the object's identity.
	Job string
	// Logger logs the start and end of each operation; nil means silent.
	Logger *slog.Logger
	// ProgressInterval is the least time between Progress events; zero
	// means one second.
	ProgressInterval time.Duration
	// TempDir holds the working directories of drills. Empty means
	// os.TempDir(). Restores work next to their data directory instead, so
	// that the final rename stays on one file system.
	TempDir string
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Pins, when set, pins the backup that each Fetch, Restore,
	// RestoreCluster and Drill reads until it returns, so that pruners
	// sharing the set (a retention.PinSet) leave it alone meanwhile.
	Pins Pinner
	// MaxRawSize bounds the decoded bytes of one backup: a fetch stops
	// with ErrIntegrity as soon as it decoded more than this or than its
	// manifest's raw size, whichever is smaller, so that a small hostile
	// object cannot fill the disk it is staged on. Zero means
	// DefaultMaxRawSize.
	MaxRawSize int64
}

// DefaultMaxRawSize is the bound of Restorer.MaxRawSize when it is zero:
// far above etcd's largest database (8 GiB recommended).
const DefaultMaxRawSize int64 = 64 << 30

// RawLimit returns the most decoded bytes a fetch of a backup whose
// manifest records rawSize (0: unknown, a legacy object or a stream)
// writes: the smaller of rawSize and MaxRawSize.
func (r *Restorer) RawLimit(rawSize int64) int64 {
	limit := r.MaxRawSize
	if limit <= 0 {
		limit = DefaultMaxRawSize
	}
	if rawSize > 0 && rawSize < limit {
		limit = rawSize
	}
	return limit
}

// Pinner holds a backup against retention while a restore reads it;
// retention.PinSet is one. Pin returns the function that releases the pin.
type Pinner interface {
	Pin(cluster, id string) (unpin func())
}

// ContextPinner is a Pinner whose wait for a pin can be cancelled;
// retention.PinSet is one. A Restorer whose Pins is a ContextPinner pins
// with PinContext and the operation's context, so that a restore cancelled
// while a prune in the same process deletes its backup returns at once
// instead of waiting for the deletes to end.
type ContextPinner interface {
	Pinner
	PinContext(ctx context.Context, cluster, id string) (unpin func(), err error)
}

// pin holds b through r.Pins, if any, and returns the release.
func (r *Restorer) pin(ctx context.Context, b Backup) (unpin func(), err error) {
	switch p := r.Pins.(type) {
	case nil:
		return func() {}, nil
	case ContextPinner:
		return p.PinContext(ctx, b.Cluster, b.ID)
	default:
		return p.Pin(b.Cluster, b.ID), nil
	}
}

// String describes the Restorer without its identities, which are secret
// keys: fmt would otherwise print them as they are.
func (r *Restorer) String() string {
	return fmt.Sprintf("Restorer{Identities: %d (redacted), TempDir: %q}", len(r.Identities), r.TempDir)
}

// GoString is String, so that %#v does not print the identities either.
func (r *Restorer) GoString() string { return r.String() }

// Validate checks the Restorer's configuration. Every operation calls it
// first.
func (r *Restorer) Validate() error {
	for i, id := range r.Identities {
		if id == nil {
			return fmt.Errorf("identity %d is nil", i+1)
		}
	}
	if r.ProgressInterval < 0 {
		return fmt.Errorf("negative progress interval %v", r.ProgressInterval)
	}
	if r.MaxRawSize < 0 {
		return fmt.Errorf("negative raw size bound %d", r.MaxRawSize)
	}
	return nil
}

// FetchResult describes a snapshot that was downloaded and verified.
type FetchResult struct {
	// Source, Cluster, ID, Key and Kind are those of the backup fetched.
	Source, Cluster, ID, Key string
	Kind                     backup.Kind
	// Path is where the snapshot was written, when it was written to a
	// file the caller keeps.
	Path string
	// Stored is the size and sha256 of the downloaded object; Raw those of
	// the snapshot written, etcd's trailer included, as
	// `etcdctl snapshot save` would have written it.
	Stored, Raw backup.Digest
	// Compression is how the object was compressed: the manifest's, or for
	// a legacy object what its first bytes show.
	Compression backup.Compression
	// Encrypted reports whether the object was age-encrypted.
	Encrypted bool
	// ManifestChecked reports whether the stored and raw digests were
	// compared with a manifest. It is false for legacy objects, whose
	// integrity rests on etcd's sha256 trailer alone.
	ManifestChecked bool
	// Elapsed is how long the fetch took.
	Elapsed time.Duration
}

// copyBufferSize is the size of the buffer decoded bytes are copied
// through.
const copyBufferSize = 256 << 10

// Fetch downloads b, decrypts and decompresses it as it streams, verifies
// it and writes the snapshot to path: the raw snapshot etcd sent, trailer
// included, ready for `etcdutl snapshot restore` or RestoreMember.
//
// Verification covers, for a backup with a manifest, the stored object's
// size and sha256, the decoded snapshot's size and sha256, and always etcd's
// own sha256 trailer. A damaged or truncated object yields an error matching
// ErrIntegrity, an encrypted backup none of r.Identities can open one
// matching ErrDecrypt. The bytes go to "<path>.part", which is synced and
// renamed to path only once every check passed; on any failure neither
// path nor the ".part" file is left. Fetch refuses, with ErrTargetExists, a
// path or ".part" file that already exists.
//
// The decoded bytes written are bounded by the manifest's raw size and
// MaxRawSize (see RawLimit): a fetch stops with ErrIntegrity at the first
// byte past them.
//
// Memory use does not depend on the snapshot's size.
func (r *Restorer) Fetch(ctx context.Context, b Backup, path string) (*FetchResult, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	unpin, err := r.pin(ctx, b)
	if err != nil {
		return nil, err
	}
	defer unpin()
	o := r.start(b, "fetch", "path", path)
	res, err := r.fetchFile(ctx, o, b, path)
	if err != nil {
		return nil, o.fail(err)
	}
	return res, nil
}

func (r *Restorer) fetchFile(ctx context.Context, o *operation, b Backup, path string) (*FetchResult, error) {
	if path == "" {
		return nil, errors.New("fetch: empty target path")
	}
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("%w: %s", ErrTargetExists, path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("check target: %w", err)
	}
	part := path + ".part"
	// O_EXCL: a ".part" of another fetch running, or of one that crashed,
	// is neither overwritten nor removed.
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("%w: %s (another fetch is writing it, or one was interrupted and it can be removed)", ErrTargetExists, part)
	}
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", part, err)
	}
	done := false
	defer func() {
		if !done {
			_ = f.Close()
			_ = os.Remove(part)
		}
	}()

	res, err := r.stream(ctx, o, b, f)
	if err != nil {
		return nil, err
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("sync %s: %w", part, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("close %s: %w", part, err)
	}
	if err := publish(part, path); err != nil {
		return nil, err
	}
	done = true
	res.Path = path
	res.Elapsed = o.elapsed()
	o.event(Event{Kind: Fetched, Path: path, StoredBytes: res.Stored.Size, RawBytes: res.Raw.Size})
	o.log.Info("backup fetched", "path", path, "stored_bytes", res.Stored.Size, "raw_bytes", res.Raw.Size, "elapsed", res.Elapsed)
	return res, nil
}

// publish moves the finished part file to path without replacing anything
// there, and syncs the directory so that the new name survives a crash. A
// hard link fails if path appeared meanwhile, which a rename would not.
func publish(part, path string) error {
	err := os.Link(part, path)
	switch {
	case errors.Is(err, fs.ErrExist):
		_ = os.Remove(part)
		return fmt.Errorf("%w: %s", ErrTargetExists, path)
	case err != nil:
		// File systems without hard links: check, then rename.
		if _, serr := os.Lstat(path); serr == nil {
			_ = os.Remove(part)
			return fmt.Errorf("%w: %s", ErrTargetExists, path)
		}
		if err := os.Rename(part, path); err != nil {
			_ = os.Remove(part)
			return fmt.Errorf("rename %s: %w", part, err)
		}
	default:
		if err := os.Remove(part); err != nil {
			_ = os.Remove(path)
			return fmt.Errorf("remove %s: %w", part, err)
		}
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}

// syncDir makes the entries of dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// stream downloads b, decodes and verifies it, writing the snapshot to w.
// It is the part of Fetch that knows nothing of files.
func (r *Restorer) stream(ctx context.Context, o *operation, b Backup, w io.Writer) (*FetchResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !b.Restorable() && !b.Kind.Logical() {
		return nil, fmt.Errorf("%w: %s is %s", ErrNotRestorable, b.Key, b.Kind)
	}
	if b.Catalog == nil {
		return nil, fmt.Errorf("source %q has no catalog", b.Source)
	}
	m := b.Manifest
	if b.Kind == backup.KindBackup || b.Kind.Logical() {
		if m == nil {
			return nil, fmt.Errorf("%w: backup %s has no manifest", ErrNotRestorable, b.Key)
		}
		if err := r.checkIdentities(m); err != nil {
			return nil, err
		}
	}

	getCtx, cancel := context.WithCancel(ctx)
	rc, err := b.Catalog.Get(getCtx, b.Key)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("get %s: %w", b.Key, err)
	}
	limit := int64(-1)
	if m != nil {
		// One byte more than the manifest says, to notice a larger object
		// without downloading all of it.
		limit = m.Stored.Size + 1
	}
	// When the encoding is the identity the stored bytes are the snapshot,
	// whose sha256 the trailer check computes: one pass is enough.
	identity := m != nil && m.Compression == backup.None && !m.Encrypted()
	pf := newPrefetcher(rc, cancel, limit, !identity)
	defer pf.Close()
	o.progress = pf.read

	dec, res, err := r.openDecoder(b, pf)
	if err != nil {
		return nil, o.classify(ctx, pf, err)
	}
	defer dec.Close()
	var decoded io.Reader = dec
	if !identity {
		// Decode ahead on another core. Its Close runs before the
		// decoder's and the download's: it ends the download first, so
		// that its goroutine cannot wait for bytes forever.
		ahead := newDecodeAhead(dec, cancel)
		defer ahead.Close()
		decoded = ahead
	}

	// A snapshot ends in etcd's sha256 trailer; a logical backup has
	// none, and its sha256 is the manifest's alone.
	var tr rawReader = backup.VerifyTrailer(decoded)
	if b.Kind.Logical() {
		tr = newHashingReader(decoded)
	}
	buf := make([]byte, copyBufferSize)
	var written int64
	var rawSize int64
	if m != nil {
		rawSize = m.Raw.Size
	}
	rawLimit := r.RawLimit(rawSize)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n, rerr := tr.Read(buf)
		if written+int64(n) > rawLimit {
			// Nothing past the bound reaches w: a hostile object decoding
			// to far more than its manifest says fails here, not on a
			// full disk.
			return nil, fmt.Errorf("%w: %s decodes to more than %d bytes (its manifest's raw size, or Restorer.MaxRawSize)", ErrIntegrity, b.Key, rawLimit)
		}
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil, fmt.Errorf("write snapshot: %w", werr)
			}
			written += int64(n)
			o.tick(written)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return nil, o.classify(ctx, pf, rerr)
		}
	}
	// Bytes a decoder left unread still count for the stored digest, which
	// then differs from the manifest's.
	if _, err := io.Copy(io.Discard, pf); err != nil {
		return nil, o.classify(ctx, pf, err)
	}

	sum, _ := tr.SHA256()
	res.Raw = backup.Digest{Size: tr.Size(), SHA256: hex.EncodeToString(sum[:])}
	res.Stored = pf.digest()
	if identity {
		// Every byte downloaded went through the trailer check (the drain
		// above found none left, or the sizes differ).
		res.Stored.SHA256 = res.Raw.SHA256
	}
	if m != nil {
		if err := compareDigest("stored object", res.Stored, m.Stored); err != nil {
			return nil, err
		}
		if err := compareDigest("snapshot", res.Raw, m.Raw); err != nil {
			return nil, err
		}
		res.ManifestChecked = true
	}
	return res, nil
}

// rawReader reads the decoded bytes of a backup and digests them.
type rawReader interface {
	io.Reader
	Size() int64
	SHA256() (sum [sha256.Size]byte, ok bool)
}

// hashingReader digests what it reads.
type hashingReader struct {
	r    io.Reader
	h    hash.Hash
	size int64
}

func newHashingReader(r io.Reader) *hashingReader { return &hashingReader{r: r, h: sha256.New()} }

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.size += int64(n)
	return n, err
}

func (h *hashingReader) Size() int64 { return h.size }

func (h *hashingReader) SHA256() (sum [sha256.Size]byte, ok bool) {
	copy(sum[:], h.h.Sum(nil))
	return sum, true
}

func compareDigest(what string, got, want backup.Digest) error {
	if got.Size != want.Size {
		return fmt.Errorf("%w: %s is %d bytes, its manifest says %d", ErrIntegrity, what, got.Size, want.Size)
	}
	if !strings.EqualFold(got.SHA256, want.SHA256) {
		return fmt.Errorf("%w: %s has sha256 %s, its manifest says %s", ErrIntegrity, what, got.SHA256, want.SHA256)
	}
	return nil
}

// ageMagic starts every binary age file.
const ageMagic = "age-encryption.org/"

// sniffBufferSize is the read buffer used to look at a legacy object's
// first bytes.
const sniffBufferSize = 64 << 10

// openDecoder returns the reader of the raw snapshot in src and a FetchResult
// filled with what is known of the encoding.
func (r *Restorer) openDecoder(b Backup, src *prefetcher) (io.ReadCloser, *FetchResult, error) {
	res := &FetchResult{Source: b.Source, Cluster: b.Cluster, ID: b.ID, Key: b.Key, Kind: b.Kind}
	if m := b.Manifest; b.Kind == backup.KindBackup {
		res.Compression, res.Encrypted = m.Compression, m.Encrypted()
		if !m.Encrypted() {
			dec, err := backup.NewDecoder(src, m.Compression)
			return dec, res, err
		}
		dec, err := backup.NewDecoder(src, m.Compression, r.Identities...)
		if errors.Is(err, ErrDecrypt) && src.failure() == nil {
			if r.holdsRecipient(m) {
				// The manifest lists one of our recipients, yet the header
				// does not open: its bytes were changed. %v keeps
				// ErrDecrypt out.
				err = fmt.Errorf("%w: the age header is damaged (an identity given is a recipient of the backup): %v", ErrIntegrity, err)
			} else {
				err = fmt.Errorf("%w (the backup's recipients: %s)", err, strings.Join(m.Encryption.Recipients, ", "))
			}
		}
		return dec, res, err
	}

	// A legacy object says nothing of its encoding but its first bytes.
	br := bufio.NewReaderSize(src, sniffBufferSize)
	var (
		plain   = br
		closers []io.Closer
	)
	if head, _ := br.Peek(len(ageMagic)); string(head) == ageMagic {
		if len(r.Identities) == 0 {
			return nil, res, fmt.Errorf("%w: %s is age-encrypted and no identity was given", ErrDecrypt, b.Key)
		}
		dec, err := backup.NewDecoder(br, backup.None, r.Identities...)
		if err != nil {
			return nil, res, err
		}
		res.Encrypted = true
		closers = append(closers, dec)
		plain = bufio.NewReaderSize(dec, sniffBufferSize)
	}
	res.Compression = sniffCompression(plain)
	dec, err := backup.NewDecoder(plain, res.Compression)
	if err != nil {
		return nil, res, err
	}
	return &multiCloser{ReadCloser: dec, others: closers}, res, nil
}

// sniffCompression tells gzip and zstd streams by their magic numbers;
// anything else is taken as a raw snapshot, which the trailer check then
// confirms or refutes.
func sniffCompression(br *bufio.Reader) backup.Compression {
	head, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		return backup.Gzip
	case bytes.HasPrefix(head, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return backup.Zstd
	}
	return backup.None
}

type multiCloser struct {
	io.ReadCloser
	others []io.Closer
}

func (m *multiCloser) Close() error {
	err := m.ReadCloser.Close()
	for _, c := range slices.Backward(m.others) {
		err = errors.Join(err, c.Close())
	}
	return err
}

// checkIdentities fails early, before any download, when m is encrypted and
// no identity was given. Whether an identity fits is age's to say, from the
// header: identities other than X25519 and hybrid ones have no recipient to
// compare with the manifest's fingerprints.
func (r *Restorer) checkIdentities(m *backup.Manifest) error {
	if m.Encrypted() && len(r.Identities) == 0 {
		return fmt.Errorf("%w: backup %s is age-encrypted and no identity was given", ErrDecrypt, m.ID)
	}
	return nil
}

// holdsRecipient reports whether an identity given is known to belong to a
// recipient of m.
func (r *Restorer) holdsRecipient(m *backup.Manifest) bool {
	if m.Encryption == nil {
		return false
	}
	for _, fp := range identityFingerprints(r.Identities) {
		if slices.Contains(m.Encryption.Recipients, fp) {
			return true
		}
	}
	return false
}

// identityFingerprints returns the fingerprints (backup.RecipientFingerprint)
// of the recipients of those ids whose recipient can be derived.
func identityFingerprints(ids []age.Identity) []string {
	var fps []string
	for _, id := range ids {
		switch id := id.(type) {
		case *age.X25519Identity:
			fps = append(fps, backup.RecipientFingerprint(id.Recipient().String()))
		case *age.HybridIdentity:
			fps = append(fps, backup.RecipientFingerprint(id.Recipient().String()))
		}
	}
	return fps
}

// operation reports the events and logs of one fetch or restore.
type operation struct {
	r        *Restorer
	what     string
	b        Backup
	log      *slog.Logger
	started  time.Time
	last     time.Time
	progress func() int64 // stored bytes downloaded so far
}

func (r *Restorer) start(b Backup, what string, attrs ...any) *operation {
	o := &operation{r: r, what: what, b: b, log: r.logger().With("op", what, "source", b.Source, "cluster", b.Cluster, "backup", b.ID)}
	o.started = r.now()
	o.last = o.started
	o.log.Info(what+" started", attrs...)
	o.event(Event{Kind: Started})
	return o
}

func (r *Restorer) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Restorer) logger() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (o *operation) elapsed() time.Duration { return o.r.now().Sub(o.started) }

func (o *operation) event(e Event) {
	if o.r.Observer == nil {
		return
	}
	e.Time = o.r.now()
	e.Source, e.Cluster, e.ID, e.Key = o.b.Source, o.b.Cluster, o.b.ID, o.b.Key
	e.StoredSize = o.b.Size
	e.Job = o.r.Job
	e.Elapsed = e.Time.Sub(o.started)
	if e.StoredBytes == 0 && o.progress != nil {
		e.StoredBytes = o.progress()
	}
	if e.Elapsed > 0 {
		e.Rate = float64(e.StoredBytes) / e.Elapsed.Seconds()
	}
	o.r.Observer.Observe(e)
}

// tick reports progress, at most once per ProgressInterval.
func (o *operation) tick(raw int64) {
	if o.r.Observer == nil {
		return
	}
	interval := o.r.ProgressInterval
	if interval <= 0 {
		interval = time.Second
	}
	if now := o.r.now(); now.Sub(o.last) >= interval {
		o.last = now
		o.event(Event{Kind: Progress, RawBytes: raw})
	}
}

// classify turns an error of the decoding chain into the error to report:
// the context's, the download's (which the decoders would have labelled
// ErrIntegrity), or an integrity error that matches ErrIntegrity whichever
// check found it.
func (o *operation) classify(ctx context.Context, pf *prefetcher, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if serr := pf.failure(); serr != nil {
		return fmt.Errorf("download %s: %w", o.b.Key, serr)
	}
	if errors.Is(err, backup.ErrSnapshotIntegrity) && !errors.Is(err, ErrIntegrity) {
		return fmt.Errorf("%w: %w", ErrIntegrity, err)
	}
	return err
}

// fail reports err as the end of the operation and returns it with the
// backup named.
func (o *operation) fail(err error) error {
	err = fmt.Errorf("%s %s from %q: %w", o.what, o.b.Key, o.b.Source, err)
	o.event(Event{Kind: Failed, Err: err})
	o.log.Warn("failed", "error", err, "elapsed", o.elapsed())
	return err
}
