package replicate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/destination"
	"github.com/etcdbackup/etcdbackup/storage"
)

// ErrConflict is returned for a backup whose ID the target holds already
// with other bytes: another backup's manifest or data object under the same
// key. The copy never overwrites it. It matches backup.ErrBackupExists.
var ErrConflict = fmt.Errorf("%w with other content on the target", backup.ErrBackupExists)

// Target is where a copy writes.
type Target struct {
	// Name is the target destination's name, recorded in the manifests
	// the copy commits there. Required.
	Name string
	// Bucket reads what the target holds already. Required.
	Bucket storage.Bucket
	// Uploader stores and commits backups there; nil means a
	// backup.BucketUploader of Bucket. A *destination.Destination is both
	// and applies its object lock (see DestinationTarget).
	Uploader backup.Uploader
}

// DestinationTarget returns d as a copy's target: backups land there as
// a backup written to d would, locked when d has an object lock.
func DestinationTarget(d *destination.Destination) Target {
	return Target{Name: d.Name(), Bucket: d, Uploader: d}
}

// Copier copies stored backups of a cluster from one store to another, as
// they are stored: the bytes are not decoded, so a copy of an encrypted
// backup needs no key. See the package documentation for its guarantees.
// The zero values of the optional fields are sane defaults. A Copier may
// run several copies at once, of different clusters or targets.
type Copier struct {
	// Source lists and reads the backups to copy. Required.
	Source backup.Catalog
	// SourceName names the source in reports and logs.
	SourceName string
	// Target is where the backups are copied to. Required.
	Target Target
	// Recheck reads back the data object of every backup the target holds
	// already and checks its sha256 before skipping it; without it a
	// committed backup whose manifest matches and whose data object has
	// the manifest's size is skipped.
	Recheck bool
	// Observer receives the copy's events; nil means none.
	Observer Observer
	// Logger logs each backup copied; nil means silent.
	Logger *slog.Logger
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// ProgressInterval is the least time between Progress events of one
	// backup; zero means one second.
	ProgressInterval time.Duration
}

// Copy copies the selected backups of cluster from the source to the
// target, fulls and standalone backups oldest first, each chain's segments
// in revision order after its full. It returns a report of every backup
// and, when some backup failed, an error joining their errors. A segment
// is copied only once its full and the segments before it are on the
// target: when one cannot be copied (it vanished from the source, pruned
// meanwhile), the rest of its chain is not copied (NotCopied), so the
// target never holds a chain with a hole.
func (c *Copier) Copy(ctx context.Context, cluster string, sel Selection) (*Report, error) {
	if err := c.validate(cluster, sel); err != nil {
		return nil, err
	}
	started := c.now()
	entries, err := backup.ListBackups(ctx, c.Source, cluster)
	if err != nil {
		return nil, fmt.Errorf("list source: %w", err)
	}
	groups, err := plan(entries, sel)
	if err != nil {
		return nil, err
	}
	total := 0
	for _, g := range groups {
		total += len(g.segments)
		if g.full != nil {
			total++
		}
	}
	r := &copyRun{c: c, ctx: ctx, cluster: cluster, total: total,
		rep: &Report{Cluster: cluster, Source: c.SourceName, Target: c.Target.Name}}
	r.event(Event{Kind: Planned, Total: total})
	c.logger().Info("copy started", "cluster", cluster, "from", c.SourceName, "to", c.Target.Name, "backups", total)
	for _, g := range groups {
		r.group(g)
	}
	r.rep.Elapsed = c.now().Sub(started)
	var errs []error
	for _, it := range r.rep.Items {
		if it.Outcome == Failed {
			errs = append(errs, fmt.Errorf("backup %s: %w", it.ID, it.Err))
		}
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	c.logger().Info("copy ended", "cluster", cluster, "copied", r.rep.Count(Copied)+r.rep.Count(Resumed),
		"skipped", r.rep.Count(Skipped), "failed", r.rep.Count(Failed), "not_copied", r.rep.Count(NotCopied),
		"bytes", r.rep.CopiedBytes, "elapsed", r.rep.Elapsed)
	return r.rep, errors.Join(errs...)
}

func (c *Copier) validate(cluster string, sel Selection) error {
	if err := backup.ValidateName("cluster", cluster); err != nil {
		return err
	}
	if err := sel.Validate(); err != nil {
		return err
	}
	switch {
	case c.Source == nil:
		return errors.New("copy has no source")
	case c.Target.Bucket == nil:
		return errors.New("copy has no target bucket")
	}
	if ro, ok := c.Target.Bucket.(interface{ ReadOnly() bool }); ok && ro.ReadOnly() {
		return fmt.Errorf("target %s: %w", c.Target.Name, storage.ErrReadOnly)
	}
	return backup.ValidateName("destination", c.Target.Name)
}

func (c *Copier) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Copier) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (c *Copier) uploader() backup.Uploader {
	if c.Target.Uploader != nil {
		return c.Target.Uploader
	}
	return &backup.BucketUploader{Bucket: c.Target.Bucket}
}

// copyRun is the state of one Copy.
type copyRun struct {
	c       *Copier
	ctx     context.Context
	cluster string
	total   int
	index   int
	rep     *Report
}

func (r *copyRun) event(e Event) {
	if r.c.Observer == nil {
		return
	}
	e.Time, e.Cluster, e.Total = r.c.now(), r.cluster, r.total
	if e.Index == 0 {
		e.Index = r.index
	}
	r.c.Observer.Observe(e)
}

// record adds it to the report.
func (r *copyRun) record(it Item) Item {
	r.rep.Items = append(r.rep.Items, it)
	r.event(Event{Kind: Done, ID: it.ID, Item: &it, Size: it.Bytes})
	log := r.c.logger().With("backup", it.ID, "cluster", r.cluster, "outcome", it.Outcome)
	if it.Err != nil {
		log.Warn("backup not copied", "error", it.Err)
	} else {
		log.Info("backup copied", "bytes", it.Bytes)
	}
	return it
}

// group copies a standalone backup, or a chain's full and then its
// segments in order, stopping the chain at the first segment that could
// not be copied.
func (r *copyRun) group(g group) {
	var stop error
	through := int64(0)
	if g.full != nil {
		r.index++
		it := r.record(r.backup(g.full))
		if !present(it.Outcome) {
			stop = fmt.Errorf("its chain's full backup %s was not copied", g.full.ID)
		}
		through = g.full.Manifest.Etcd.Revision.Low
	} else {
		stop = fmt.Errorf("its chain's full backup %s is not on the source", g.chain)
	}
	if len(g.segments) == 0 {
		return
	}
	whole := true
	for i := range g.segments {
		s := &g.segments[i]
		r.index++
		m := s.Manifest
		if stop == nil && r.ctx.Err() != nil {
			stop = r.ctx.Err()
		}
		if stop != nil {
			whole = false
			r.record(Item{ID: s.ID, Kind: s.Kind, Outcome: NotCopied, Bytes: s.Size, Created: s.Created, Err: stop})
			continue
		}
		it := r.record(r.backup(s))
		switch {
		case present(it.Outcome):
			if m.FirstRevision <= through+1 {
				through = max(through, m.LastRevision)
			}
		case m.LastRevision <= through:
			// Another attempt at revisions the target holds already.
			whole = false
		default:
			whole = false
			stop = fmt.Errorf("segment %s (revisions %d to %d) was not copied; the chain stops at revision %d on the target",
				s.ID, m.FirstRevision, m.LastRevision, through)
		}
	}
	r.rep.Chains = append(r.rep.Chains, Chain{Full: g.chain, Segments: len(g.segments), Through: through, Whole: whole})
}

// present reports whether a backup of outcome o is on the target.
func present(o Outcome) bool { return o == Copied || o == Resumed || o == Skipped }

// backup copies one backup, unless the target holds it.
func (r *copyRun) backup(e *backup.Entry) Item {
	it := Item{ID: e.ID, Kind: e.Kind, Bytes: e.Size, Created: e.Created}
	want := *e.Manifest
	want.Destination = r.c.Target.Name
	out, err := r.copyOnce(&want, true)
	it.Outcome, it.Err = out, err
	if err != nil {
		it.Outcome = Failed
	}
	if out == Copied {
		r.rep.CopiedBytes += e.Size
	}
	return it
}

// copyOnce copies the backup want describes (the source's manifest with the
// target's name), or finishes or skips it after looking at what the target
// holds. retry allows one more look when another writer took a key
// between the look and the write.
func (r *copyRun) copyOnce(want *backup.Manifest, retry bool) (Outcome, error) {
	st, err := r.inspect(want)
	if err != nil {
		return Failed, err
	}
	switch {
	case st.committed:
		if err := r.ensureLocked(want); err != nil {
			return Failed, err
		}
		return Skipped, nil
	case st.dataStored:
		if err := r.ensureLocked(want); err != nil {
			return Failed, err
		}
		err = r.c.uploader().Commit(r.ctx, want)
		if err == nil {
			return Resumed, nil
		}
	default:
		err = r.transfer(want)
		if err == nil {
			return Copied, nil
		}
	}
	if retry && errors.Is(err, backup.ErrBackupExists) && r.ctx.Err() == nil {
		return r.copyOnce(want, false)
	}
	return Failed, err
}

// transfer streams the data object from the source to the target,
// verifying it on the way, and commits the manifest.
func (r *copyRun) transfer(want *backup.Manifest) error {
	key := backup.ClusterPrefix(want.Cluster) + want.DataKey
	rc, err := r.c.Source.Get(r.ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("data object %s vanished from the source (pruned meanwhile?): %w", key, err)
	}
	if err != nil {
		return fmt.Errorf("read source: %w", err)
	}
	defer rc.Close()
	pr := &progressReader{r: rc, run: r, id: want.ID, size: want.Stored.Size, interval: r.c.ProgressInterval}
	vr := newVerifyingReader(pr, want.Stored)
	up := r.c.uploader()
	if err := up.Upload(r.ctx, want, vr); err != nil {
		if vr.err != nil && errors.Is(vr.err, ErrDigestMismatch) {
			return fmt.Errorf("source %s: %w", key, vr.err)
		}
		return fmt.Errorf("upload: %w", err)
	}
	if !vr.verified() {
		// The store took the object before it was read to its end: it is
		// not proven to be the manifest's, so it is never committed.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), time.Minute)
		defer cancel()
		derr := backup.RemoveOwnData(cctx, r.c.Target.Bucket, want)
		return errors.Join(fmt.Errorf("%w: the target stored %s before it was read to its end", ErrDigestMismatch, key), derr)
	}
	if err := up.Commit(r.ctx, want); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// progressReader reports Progress events while a data object is copied.
type progressReader struct {
	r        io.Reader
	run      *copyRun
	id       string
	size, n  int64
	interval time.Duration
	last     time.Time
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if p.run.c.Observer == nil {
		return n, err
	}
	interval := p.interval
	if interval <= 0 {
		interval = time.Second
	}
	if now := p.run.c.now(); now.Sub(p.last) >= interval || err != nil {
		p.last = now
		p.run.event(Event{Kind: Progress, ID: p.id, Bytes: p.n, Size: p.size})
	}
	return n, err
}
