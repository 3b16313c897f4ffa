package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"filippo.io/age"
)

// Pipeline takes one snapshot and stores it on one or more destinations:
//
//	snapshot -> verify trailer -> compress -> encrypt -> upload to every target -> commit manifests
//
// The snapshot is read once. Its encoded bytes stream to every target at
// once (each target's Uploader reads its own pipe, and the slowest sets the
// pace), so memory is bounded by the uploaders' buffers, never by the
// snapshot's size. With Spool set, the encoded bytes go to a temporary file
// first, so that etcd's read transaction ends as soon as the snapshot is
// read, and are uploaded from there.
//
// A target's backup becomes visible only when its manifest is committed,
// after every byte was uploaded and the snapshot's trailer matched. A
// failing target does not stop the others.
//
// The zero values of the optional fields are sane defaults. A Pipeline may
// run several backups at once.
type Pipeline struct {
	// Snapshotter takes the snapshot. Required.
	Snapshotter Snapshotter
	// Compression of the stored bytes; zero means Zstd (at its fastest
	// level: see ZstdFastest for what the levels cost and buy).
	Compression Compression
	// Encryption of the stored bytes; zero means none.
	Encryption Encryption
	// Spool, when set, writes the encoded snapshot to a temporary file
	// before uploading it.
	Spool *Spool
	// Observer receives the events of every backup; nil means none.
	Observer Observer
	// Logger logs each backup's start and end; nil means silent.
	Logger *slog.Logger
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// ProgressInterval is the least time between Progress events; zero
	// means one second.
	ProgressInterval time.Duration
	// MemoryBudget bounds the compressor's memory, in bytes: zstd then
	// runs two encoders (one below 16 MiB), each with a window of at most
	// a quarter of its share, from 256 KiB to 8 MiB. Zero means two
	// encoders of 8 MiB windows, about 40 MiB. Smaller windows cost a
	// little ratio (16 MiB: about 5% more bytes stored), one encoder
	// throughput on a machine with cores to spare. The store's upload
	// buffers are bounded where it is opened (s3.Options.PartSize x
	// PartsInFlight, s3.PartsWithin; destination.Options), the etcd
	// stream by gRPC.
	MemoryBudget int64
	// StallTimeout bounds how long one destination may take to accept
	// each chunk (at most 256 KiB) of the stream: a destination stalled
	// longer is dropped with ErrDestinationStalled, its upload cancelled,
	// so that it neither slows the others nor holds etcd's read
	// transaction open. An uploader may stop reading while its buffered
	// parts upload (s3: until one of them ends, a part of PartSize bytes,
	// or with AdaptiveParts of at most half its PartSize x PartsInFlight
	// budget, the whole budget for the last parts of a stream near the
	// largest object), so set it well above the time one part takes. Zero
	// means no bound.
	StallTimeout time.Duration
	// Slots, when set, bounds the backups in flight of every Pipeline
	// that shares it (see RunSlots); nil means no bound.
	Slots *RunSlots
}

// Spool configures the temporary file of spool mode.
type Spool struct {
	// Dir holds the temporary file; empty means os.TempDir(). The file is
	// created with mode 0600 and removed when the backup ends. Without
	// encryption it holds the compressed snapshot in the clear.
	Dir string
	// MaxBytes bounds the file; the backup fails when the encoded snapshot
	// is larger. Zero means 16 GiB, twice etcd's largest recommended
	// database.
	MaxBytes int64
}

// DefaultSpoolMaxBytes is the spool bound when Spool.MaxBytes is zero.
const DefaultSpoolMaxBytes = 16 << 30

// Target is one destination of a backup.
type Target struct {
	// Destination is the destination's name, recorded in the manifest.
	Destination string
	// Uploader stores the backup there.
	Uploader Uploader
}

// Request asks for one backup.
type Request struct {
	// Cluster names the cluster whose etcd is snapshotted.
	Cluster string
	// Job names the run for the host: its backup config or job (the
	// scheduler gives the job's ID). Every event of the run carries it;
	// it is not stored.
	Job string
	// Name is the backup's name. The backup's ID is "<cluster>-<name>", with
	// "-<timestamp>" appended when Scheduled is set.
	Name string
	// Scheduled marks a run of a schedule.
	Scheduled bool
	// Kind is the manifest kind of what the Snapshotter serves: empty for
	// an etcd snapshot, ManifestKindKeysJSON or ManifestKindKeys (the
	// exporter's Kind) for a KeysExporter's logical backup.
	Kind string
	// Synthetic, for a full backup that compaction made offline from a
	// chain (package compact), is recorded in its manifest
	// (Manifest.Synthetic); the Snapshotter then serves the replayed
	// database at exactly that revision. Nil for every other backup.
	Synthetic *SyntheticInfo
	// Targets are the destinations to write to: at least one, with distinct
	// names.
	Targets []Target

	// recoveryOf is, for the full backup a follower's recovery takes, the
	// chain whose tail it catches up after it: recorded in the manifest
	// (Manifest.Recovery, up to the backup's upper revision) so that
	// retention keeps that chain from the moment the new one starts.
	recoveryOf string
}

// Validate checks the request's names and targets. Errors about names
// match ErrInvalidName.
func (r *Request) Validate() error {
	if err := ValidateName("cluster", r.Cluster); err != nil {
		return err
	}
	if err := ValidateName("backup", r.Name); err != nil {
		return err
	}
	if id := UniqueBackupID(BackupID(r.Cluster, r.Name, time.Time{}, r.Scheduled), strings.Repeat("0", RunLen)); len(id) > 200 {
		return fmt.Errorf("backup id of %d bytes is too long", len(id))
	}
	if r.Kind != "" && !IsLogicalKind(r.Kind) {
		return fmt.Errorf("backup kind %q is not one a pipeline writes", r.Kind)
	}
	if r.Synthetic != nil && r.Kind != "" {
		return fmt.Errorf("a %s backup cannot be synthetic", r.Kind)
	}
	if len(r.Targets) == 0 {
		return errors.New("backup request has no targets")
	}
	seen := make(map[string]bool, len(r.Targets))
	for _, t := range r.Targets {
		if err := ValidateName("destination", t.Destination); err != nil {
			return err
		}
		if seen[t.Destination] {
			return fmt.Errorf("destination %q is a target twice", t.Destination)
		}
		seen[t.Destination] = true
		if t.Uploader == nil {
			return fmt.Errorf("destination %q has no uploader", t.Destination)
		}
	}
	return nil
}

// Result describes a backup: what was read, and what became of it on each
// target.
type Result struct {
	ID       string
	Cluster  string
	Created  time.Time
	Snapshot SnapshotInfo
	// Raw is the snapshot as etcd sent it; Stored the encoded object.
	// Both are zero when the snapshot could not be read to its end.
	Raw, Stored Digest
	// Outcomes has one entry per target, in the request's order.
	Outcomes []Outcome
}

// Outcome is the result of a backup on one target.
type Outcome struct {
	Destination string
	// Manifest is the committed manifest; nil when Err is set.
	Manifest *Manifest
	Err      error
}

// Succeeded returns the names of the destinations that committed the
// backup.
func (r *Result) Succeeded() []string {
	var names []string
	for _, o := range r.Outcomes {
		if o.Err == nil {
			names = append(names, o.Destination)
		}
	}
	return names
}

// DestinationError is the failure of a backup on one destination.
type DestinationError struct {
	Destination string
	Err         error
}

// Error names the destination and the cause.
func (e *DestinationError) Error() string {
	return fmt.Sprintf("destination %q: %v", e.Destination, e.Err)
}

// Unwrap returns the cause.
func (e *DestinationError) Unwrap() error { return e.Err }

// Run takes one backup. It returns the result and, if any target failed, an
// error joining a *DestinationError per failed target (the result says
// which targets succeeded). An invalid request fails before anything is
// read or written.
//
// One ID names one snapshot on every target: a run that finds its ID
// taken on any target (ErrBackupExists) commits it on none, and a
// scheduled run then backs up again, on every target, under the ID with
// its run token appended (UniqueBackupID).
func (p *Pipeline) Run(ctx context.Context, req Request) (*Result, error) {
	return p.runSlotted(ctx, req, false)
}

// runSlotted is Run; inSlot says the caller holds a slot of p.Slots
// already (see Follower.takeFull), so that the run takes none.
func (p *Pipeline) runSlotted(ctx context.Context, req Request, inSlot bool) (*Result, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if p.Snapshotter == nil {
		return nil, errors.New("pipeline has no snapshotter")
	}
	compression := p.Compression.OrDefault()
	if err := compression.Validate(); err != nil {
		return nil, err
	}
	recipients, fingerprints, err := p.Encryption.parse()
	if err != nil {
		return nil, err
	}
	if !inSlot {
		release, err := p.Slots.take(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
	}

	created := p.now().UTC()
	token, err := NewRunToken()
	if err != nil {
		return nil, err
	}
	id := BackupID(req.Cluster, req.Name, created, req.Scheduled)
	unique := !allExclusive(req.Targets)
	if unique {
		id = UniqueBackupID(id, token)
	}
	base := Manifest{
		Format:      ManifestFormat,
		Kind:        req.Kind,
		ID:          id,
		Cluster:     req.Cluster,
		Name:        req.Name,
		Created:     created,
		DataKey:     DataKey(id, created, compression, len(recipients) > 0),
		Compression: compression.Algorithm(),
		// The level is a record only: every zstd stream decodes the same.
		CompressionLevel: compression.Level(),
		Library:          LibraryVersion(),
		Run:              token,
		Synthetic:        req.Synthetic,
	}
	if len(recipients) > 0 {
		base.Encryption = &EncryptionInfo{Scheme: "age", Recipients: fingerprints}
	}
	if req.Kind != "" {
		base.Format = DeltaManifestFormat
	}
	res, err := p.newRun(ctx, req, base, recipients).do()
	if err == nil || unique || !req.Scheduled || !takenAnywhere(res) || committedAnywhere(res) {
		return res, err
	}
	// Another scheduled run of the config took this ID in the same
	// millisecond on at least one target, and this run committed it on
	// none (see run.commit): take the backup again under the ID with this
	// run's token, which no other run has, on every target. A one-shot ID
	// is meant to be taken once: its second run fails with ErrBackupExists.
	// A run that committed the ID somewhere (a manifest write in doubt on
	// another target) is not taken again: its backup exists.
	p.logger().Warn("backup ID taken by another run; backing up again under an ID of its own", "backup", id, "cluster", req.Cluster)
	base.ID = UniqueBackupID(id, token)
	base.DataKey = DataKey(base.ID, created, compression, len(recipients) > 0)
	return p.newRun(ctx, req, base, recipients).do()
}

// newRun prepares one attempt at the backup base describes.
func (p *Pipeline) newRun(ctx context.Context, req Request, base Manifest, recipients []age.Recipient) *run {
	r := &run{
		p:          p,
		ctx:        ctx,
		req:        req,
		base:       base,
		recipients: recipients,
		res:        &Result{ID: base.ID, Cluster: req.Cluster, Created: base.Created, Outcomes: make([]Outcome, len(req.Targets))},
		log:        p.logger().With("backup", base.ID, "cluster", req.Cluster),
	}
	for i, t := range req.Targets {
		r.res.Outcomes[i].Destination = t.Destination
	}
	return r
}

// takenAnywhere reports whether a target failed because the backup's ID
// was taken (ErrBackupExists).
func takenAnywhere(res *Result) bool {
	if res == nil {
		return false
	}
	for _, o := range res.Outcomes {
		if errors.Is(o.Err, ErrBackupExists) {
			return true
		}
	}
	return false
}

// committedAnywhere reports whether a target committed the backup.
func committedAnywhere(res *Result) bool {
	for _, o := range res.Outcomes {
		if o.Manifest != nil {
			return true
		}
	}
	return false
}

// allExclusive reports whether every target creates objects exclusively,
// so that two runs given the same ID cannot both commit it.
func allExclusive(targets []Target) bool {
	for _, t := range targets {
		if !uploadsExclusively(t.Uploader) {
			return false
		}
	}
	return true
}

func (p *Pipeline) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Pipeline) logger() *slog.Logger {
	if p.Logger != nil {
		return p.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// run is the state of one backup.
type run struct {
	p          *Pipeline
	ctx        context.Context
	req        Request
	base       Manifest
	recipients []age.Recipient
	res        *Result
	log        *slog.Logger
	started    time.Time
	expected   int64 // the snapshot's expected size, once open
}

func (r *run) event(e Event) {
	if r.p.Observer == nil {
		return
	}
	e.Time = r.p.now()
	e.ID, e.Cluster, e.Job = r.res.ID, r.res.Cluster, r.req.Job
	if e.ExpectedBytes == 0 {
		e.ExpectedBytes = r.expected
	}
	if e.Elapsed == 0 && !r.started.IsZero() {
		e.Elapsed = e.Time.Sub(r.started)
	}
	r.p.Observer.Observe(e)
}

func (r *run) do() (*Result, error) {
	r.started = r.p.now()
	r.log.Info("backup started", "destinations", len(r.req.Targets), "compression", r.p.Compression.OrDefault(), "encrypted", r.base.Encryption != nil, "spool", r.p.Spool != nil)
	dests := make([]string, len(r.req.Targets))
	for i, t := range r.req.Targets {
		dests[i] = t.Destination
	}
	r.event(Event{Kind: Started, Destinations: dests})

	snap, err := r.p.Snapshotter.Snapshot(r.ctx)
	if err != nil {
		return r.finish(fmt.Errorf("open snapshot: %w", err))
	}
	defer snap.Close()
	r.expected = snap.Info().DBSize

	if r.p.Spool != nil {
		err = r.spooled(snap)
	} else {
		err = r.streamed(snap)
	}
	return r.finish(err)
}

// streamed encodes the snapshot straight into every target's upload.
func (r *run) streamed(snap *Snapshot) error {
	fan := newFanout(len(r.req.Targets), r.p.StallTimeout)
	var wg sync.WaitGroup
	uploaded := r.startUploads(&wg, fan)

	stored := r.newDigester(fan)
	err := r.encode(snap, stored)
	_ = snap.Close() // ends etcd's read transaction before the last commits
	fan.close(err)
	wg.Wait()
	if err != nil {
		return err
	}
	return r.commit(snap.Info(), stored, uploaded)
}

// spooled encodes the snapshot into a temporary file, closes the snapshot,
// then uploads the file to every target.
func (r *run) spooled(snap *Snapshot) error {
	f, err := os.CreateTemp(r.p.Spool.Dir, "etcdbackup-spool-*")
	if err != nil {
		return fmt.Errorf("create spool file: %w", err)
	}
	defer func() {
		_ = f.Close()
		_ = os.Remove(f.Name())
	}()
	limit := r.p.Spool.MaxBytes
	if limit <= 0 {
		limit = DefaultSpoolMaxBytes
	}
	stored := r.newDigester(&limitedWriter{w: f, left: limit})
	if err := r.encode(snap, stored); err != nil {
		return err
	}
	_ = snap.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("rewind spool file: %w", err)
	}

	fan := newFanout(len(r.req.Targets), r.p.StallTimeout)
	var wg sync.WaitGroup
	uploaded := r.startUploads(&wg, fan)
	_, err = io.Copy(fan, contextReader{r.ctx, f})
	if err != nil {
		err = fmt.Errorf("upload from spool: %w", err)
	}
	fan.close(err)
	wg.Wait()
	if err != nil && !errors.Is(err, errAllBranchesFailed) {
		return err
	}
	return r.commit(snap.Info(), stored, uploaded)
}

// startUploads starts one Upload per target, each reading its branch of
// fan. The returned slice says, once wg is done, which uploads succeeded.
func (r *run) startUploads(wg *sync.WaitGroup, fan *fanout) []bool {
	uploaded := make([]bool, len(r.req.Targets))
	for i, t := range r.req.Targets {
		b := fan.branches[i]
		m := r.base
		m.Destination = t.Destination
		ctx, cancel := context.WithCancelCause(r.ctx)
		b.cancel = cancel
		wg.Go(func() {
			defer cancel(nil)
			err := t.Uploader.Upload(ctx, &m, b.r)
			if cause := context.Cause(ctx); err != nil && errors.Is(cause, ErrDestinationStalled) && !errors.Is(err, cause) {
				err = fmt.Errorf("%w: %w", cause, err)
			}
			b.done(err)
			if err != nil {
				r.res.Outcomes[i].Err = fmt.Errorf("upload: %w", err)
				return
			}
			uploaded[i] = true
		})
	}
	return uploaded
}

// encode copies the verified snapshot through the codec into dst, with
// progress events. It returns the first error of the snapshot (including a
// failed trailer check), the codec or dst.
func (r *run) encode(snap *Snapshot, dst *digester) error {
	enc, err := newEncoder(dst, encoderOptions{compression: r.p.Compression.OrDefault(), budget: r.p.MemoryBudget}, r.recipients)
	if err != nil {
		return err
	}
	src := &progressReader{r: snap, run: r, stored: dst, interval: r.p.ProgressInterval}
	buf := make([]byte, 256<<10)
	if _, err := io.CopyBuffer(enc, src, buf); err != nil {
		enc.abort()
		if errors.Is(err, errAllBranchesFailed) {
			return err
		}
		return fmt.Errorf("read snapshot: %w", err)
	}
	if err := enc.Close(); err != nil {
		return err
	}
	return nil
}

// commit writes the manifest of every target whose upload succeeded.
func (r *run) commit(info SnapshotInfo, stored *digester, uploaded []bool) error {
	r.res.Snapshot = info
	r.res.Raw = Digest{Size: info.Size, SHA256: hex.EncodeToString(info.SHA256[:])}
	r.res.Stored = stored.digest(r.res.Raw)
	if r.res.Stored.Size != r.res.Raw.Size && stored.h == nil {
		return fmt.Errorf("%w: %d bytes stored for a snapshot of %d", ErrIntegrity, r.res.Stored.Size, r.res.Raw.Size)
	}

	base := r.base
	base.Raw, base.Stored = r.res.Raw, r.res.Stored
	base.Etcd = EtcdInfo{
		Version:        info.EtcdVersion,
		StorageVersion: info.StorageVersion,
		ClusterID:      formatID(info.ClusterID),
		MemberID:       formatID(info.MemberID),
		MemberName:     info.MemberName,
		Revision:       RevisionInfo{Low: info.RevisionLow, High: info.RevisionHigh},
	}
	if info.LeaderID != 0 {
		base.Etcd.Health = &MemberHealth{Healthy: info.Healthy, Leader: formatID(info.LeaderID), AppliedIndex: info.RaftAppliedIndex,
			LeaderAppliedIndex: info.LeaderAppliedIndex, LeaderRevision: info.LeaderRevision}
	}
	base.Keys = info.Keys
	if r.req.recoveryOf != "" && info.RevisionHigh > 0 {
		base.Recovery = &RecoveryTail{Chain: r.req.recoveryOf, Until: info.RevisionHigh}
	}

	if takenAnywhere(r.res) {
		r.withdraw(uploaded)
		return nil
	}
	var wg sync.WaitGroup
	for i, t := range r.req.Targets {
		if !uploaded[i] {
			continue
		}
		wg.Go(func() {
			m := base
			m.Destination = t.Destination
			m.Completed = r.p.now().UTC()
			if err := t.Uploader.Commit(r.ctx, &m); err != nil {
				r.res.Outcomes[i].Err = fmt.Errorf("commit: %w", err)
				return
			}
			r.res.Outcomes[i].Manifest = &m
		})
	}
	wg.Wait()
	return nil
}

// withdraw gives up the backup's ID on every target whose upload
// succeeded, because another run holds the ID on some other target: were
// both runs to commit where they won, the targets would hold different
// snapshots under one ID, which restore takes for one backup. Nothing is
// committed; the data objects this run wrote are discarded where the
// Uploader is a Discarder (a BucketUploader removes only objects carrying
// its run token), and are otherwise orphans retention collects. A
// scheduled run then backs up again under an ID of its own.
func (r *run) withdraw(uploaded []bool) {
	var wg sync.WaitGroup
	for i, t := range r.req.Targets {
		if !uploaded[i] {
			continue
		}
		r.res.Outcomes[i].Err = fmt.Errorf("commit: %w on another destination; not committed here", ErrBackupExists)
		d, ok := t.Uploader.(Discarder)
		if !ok {
			continue
		}
		wg.Go(func() {
			m := r.base
			m.Destination = t.Destination
			if err := d.Discard(r.ctx, &m); err != nil {
				r.log.Warn("withdrawn data object left for retention to collect", "destination", t.Destination, "error", err)
			}
		})
	}
	wg.Wait()
}

// finish records err (a failure of the whole backup) on every target that
// has no outcome yet, reports the outcome, and builds Run's return values.
func (r *run) finish(err error) (*Result, error) {
	var errs []error
	for i := range r.res.Outcomes {
		o := &r.res.Outcomes[i]
		if o.Err == nil && o.Manifest == nil {
			if err == nil {
				err = errors.New("backup ended without an outcome")
			}
			o.Err = err
		}
		if o.Err != nil {
			errs = append(errs, &DestinationError{Destination: o.Destination, Err: o.Err})
			r.event(Event{Kind: Failed, Destination: o.Destination, Err: o.Err})
			r.log.Warn("backup failed on destination", "destination", o.Destination, "error", o.Err)
			continue
		}
		r.event(Event{Kind: Uploaded, Destination: o.Destination, RawBytes: r.res.Raw.Size,
			StoredBytes: r.res.Stored.Size, Manifest: o.Manifest})
	}
	elapsed := r.p.now().Sub(r.started)
	if len(errs) > 0 {
		joined := errors.Join(errs...)
		r.event(Event{Kind: Failed, Err: joined, RawBytes: r.res.Raw.Size})
		r.log.Error("backup failed", "failed", len(errs), "succeeded", len(r.res.Outcomes)-len(errs), "elapsed", elapsed)
		return r.res, joined
	}
	r.event(Event{Kind: Completed, RawBytes: r.res.Raw.Size, StoredBytes: r.res.Stored.Size})
	r.log.Info("backup completed", "raw_bytes", r.res.Raw.Size, "stored_bytes", r.res.Stored.Size, "elapsed", elapsed)
	return r.res, nil
}

func formatID(id uint64) string {
	if id == 0 {
		return ""
	}
	return strconv.FormatUint(id, 16)
}

// digester counts and hashes the bytes written through it.
type digester struct {
	w    io.Writer
	h    hash.Hash
	size int64
	mu   sync.Mutex // size is read by progress events
}

// newDigester counts the stored bytes and hashes them, unless the encoding
// is the identity (no compression, no encryption): the stored bytes are then
// the snapshot's, whose SHA-256 the trailer check already computes, and a
// second pass over them would cost about half a second per GiB for nothing.
func (r *run) newDigester(w io.Writer) *digester {
	d := &digester{w: w}
	if r.base.Compression != None || len(r.recipients) > 0 {
		d.h = sha256.New()
	}
	return d
}

func (d *digester) Write(p []byte) (int, error) {
	n, err := d.w.Write(p)
	if d.h != nil {
		d.h.Write(p[:n])
	}
	d.mu.Lock()
	d.size += int64(n)
	d.mu.Unlock()
	return n, err
}

func (d *digester) written() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.size
}

// digest returns the stored bytes' size and SHA-256; raw is the snapshot's
// digest, which is the stored one when the encoding is the identity.
func (d *digester) digest(raw Digest) Digest {
	if d.h == nil {
		return Digest{Size: d.written(), SHA256: raw.SHA256}
	}
	return Digest{Size: d.written(), SHA256: hex.EncodeToString(d.h.Sum(nil))}
}

// errSpoolFull is returned when the encoded snapshot outgrows the spool.
var errSpoolFull = errors.New("encoded snapshot is larger than the spool's MaxBytes")

type limitedWriter struct {
	w    io.Writer
	left int64
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		return 0, errSpoolFull
	}
	n, err := l.w.Write(p)
	l.left -= int64(n)
	return n, err
}

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

// progressReader reports Progress events as the snapshot is read.
type progressReader struct {
	r        io.Reader
	run      *run
	stored   *digester
	interval time.Duration
	n        int64
	last     time.Time
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if p.run.p.Observer == nil {
		return n, err
	}
	interval := p.interval
	if interval <= 0 {
		interval = time.Second
	}
	now := p.run.p.now()
	if now.Sub(p.last) >= interval {
		p.last = now
		elapsed := now.Sub(p.run.started)
		rate := 0.0
		if elapsed > 0 {
			rate = float64(p.n) / elapsed.Seconds()
		}
		p.run.event(Event{Kind: Progress, RawBytes: p.n, StoredBytes: p.stored.written(), Rate: rate, Elapsed: elapsed})
	}
	return n, err
}
