package compact

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/restore"
)

// ErrNothingToCompact is returned when the revision asked for is already
// a full backup's: no delta segment would be applied.
var ErrNothingToCompact = errors.New("nothing to compact")

// ErrDrill matches the failure of the drill of a synthetic full backup
// before its manifest is written: the backup was not committed there.
var ErrDrill = errors.New("drill of the synthetic full backup")

// ErrEncryptionChanged is returned when the synthetic full backup would be
// encrypted and its chain's full backup is not, or the other way round
// (typically: the chain is encrypted and the Pipeline has no recipients),
// unless Request.AllowEncryptionChange is set. Other recipients than the
// base's are allowed: that is how keys are rotated.
var ErrEncryptionChanged = errors.New("compaction would change the chain's encryption")

// Compactor makes synthetic full backups. A Compactor may run several
// compactions at once.
type Compactor struct {
	// Restorer reads the chain and replays it, and drills the new backup:
	// its Identities must open the chain's backups and the new one (the
	// Pipeline's Encryption). Its TempDir (the system's when empty) holds
	// the compaction's work directory, etcdbackup-compact-*: the replayed
	// database, its defragmented copy and the drill's restore, about three
	// times the cluster's database at the peak. A compaction removes its
	// directory when it ends, and one killed leaves it: the next
	// compaction in the same TempDir removes those that no running
	// compaction holds (on Unix, by a lock file). Required.
	Restorer *restore.Restorer
	// Pipeline encodes and stores the synthetic full backup as it stores
	// any full backup (Compression, Encryption, MemoryBudget, Spool,
	// Observer, ...). Its Snapshotter is not used. Required.
	Pipeline *backup.Pipeline
	// Logger logs each compaction; nil means silent.
	Logger *slog.Logger
}

// Target is a destination the synthetic full backup is stored on.
type Target struct {
	backup.Target
	// Catalog reads the destination back: the new backup is drilled from
	// there before its manifest is written. Required.
	Catalog backup.Catalog
}

// Request asks for one compaction.
type Request struct {
	// Cluster is the cluster whose chain is compacted. Required.
	Cluster string
	// Name is the backup name of the synthetic full backup; empty means
	// the base full backup's, so that retention scoped to a backup config
	// (retention.PlanOptions.Name) counts it among that config's.
	Name string
	// Job names the run for the host, in the pipeline's events.
	Job string
	// AllowEncryptionChange stores the synthetic full backup with the
	// Pipeline's encryption even when the chain's full backup is
	// encrypted and it is not, or the other way round; without it that is
	// refused with ErrEncryptionChanged.
	AllowEncryptionChange bool
	// ToRevision is the revision of the synthetic full backup; zero means
	// the last revision committed by the newest chain.
	ToRevision int64
	// Sources are where the chain is read. Required.
	Sources []restore.Source
	// Targets are where the synthetic full backup is stored. Required.
	Targets []Target
}

// Validate checks the request.
func (q Request) Validate() error {
	if err := backup.ValidateName("cluster", q.Cluster); err != nil {
		return err
	}
	if q.Name != "" {
		if err := backup.ValidateName("backup", q.Name); err != nil {
			return err
		}
	}
	if q.ToRevision < 0 {
		return fmt.Errorf("revision %d is negative", q.ToRevision)
	}
	if len(q.Sources) == 0 {
		return errors.New("compaction has no sources")
	}
	if len(q.Targets) == 0 {
		return errors.New("compaction has no targets")
	}
	for _, t := range q.Targets {
		if t.Catalog == nil {
			return fmt.Errorf("target %q has no catalog to drill the new backup from", t.Destination)
		}
	}
	return nil
}

// Result describes a compaction.
type Result struct {
	// ID is the synthetic full backup's ID, Revision its exact revision.
	ID       string
	Cluster  string
	Revision int64
	// Synthetic is what its manifest records of where it came from.
	Synthetic backup.SyntheticInfo
	// Revisions and Events count what the replay applied; Replay is how
	// long the replay took, Elapsed the whole compaction.
	Revisions, Events int64
	Replay, Elapsed   time.Duration
	// Backup is the pipeline's result: the outcome on every target.
	Backup *backup.Result
}

// Compact makes a synthetic full backup of q.Cluster at q.ToRevision (see
// the package documentation). When a target fails, the others keep their
// committed backup: the error joins the failures of the targets that did
// not commit it, and the result (Backup.Outcomes) says which did. A
// revision in a gap of the stored history is refused (restore.ErrNoChain),
// as is one already held by a full backup (ErrNothingToCompact).
func (c *Compactor) Compact(ctx context.Context, q Request) (*Result, error) {
	if c.Restorer == nil || c.Pipeline == nil {
		return nil, errors.New("compactor needs a restorer and a pipeline")
	}
	if err := q.Validate(); err != nil {
		return nil, err
	}
	started := time.Now()
	plan, err := c.plan(ctx, q)
	if err != nil {
		return nil, err
	}
	if err := c.checkEncryption(plan.Full.Manifest, q.AllowEncryptionChange); err != nil {
		return nil, err
	}
	sweepStale(c.Restorer.TempDir, c.logger())
	wd, err := newWorkDir(c.Restorer.TempDir)
	if err != nil {
		return nil, err
	}
	defer wd.remove()
	work := wd.path
	// The drill's restore goes in the work directory too: a compaction
	// killed during it leaves one directory, which the next one sweeps.
	drills := *c.Restorer
	drills.TempDir = work
	db := filepath.Join(work, "db")
	replayed, err := c.Restorer.RestorePointDatabase(ctx, plan, db)
	if err != nil {
		return nil, err
	}
	status, err := restore.Status(db)
	if err != nil {
		return nil, err
	}
	if status.Revision != plan.Revision {
		return nil, fmt.Errorf("%w: the replayed database is at revision %d, not %d", restore.ErrReplay, status.Revision, plan.Revision)
	}
	last := plan.Segments[len(plan.Segments)-1].Manifest
	res := &Result{Cluster: q.Cluster, Revision: plan.Revision, Revisions: replayed.Revisions, Events: replayed.Events, Replay: replayed.Replay,
		Synthetic: backup.SyntheticInfo{Base: plan.Full.ID, BaseRevision: replayed.FullRevision, Chain: last.Chain,
			Revision: plan.Revision, Segments: int64(len(plan.Segments))}}
	name := q.Name
	if name == "" {
		name = plan.Full.Manifest.Name
	}
	p := *c.Pipeline
	p.Snapshotter = &databaseSnapshotter{path: db, info: snapshotInfo(plan.Full.Manifest, plan.Revision)}
	req := backup.Request{Cluster: q.Cluster, Job: q.Job, Name: name, Scheduled: true, Synthetic: &res.Synthetic}
	for _, t := range q.Targets {
		v := &drilledUploader{Uploader: t.Uploader, catalog: t.Catalog, source: t.Destination, restorer: &drills, want: status}
		req.Targets = append(req.Targets, backup.Target{Destination: t.Destination, Uploader: v})
	}
	res.Backup, err = p.Run(ctx, req)
	if res.Backup != nil {
		res.ID = res.Backup.ID
	}
	res.Elapsed = time.Since(started)
	if err != nil {
		return res, fmt.Errorf("store the synthetic full backup of %q at revision %d: %w", q.Cluster, plan.Revision, err)
	}
	c.logger().Info("chain compacted", "cluster", q.Cluster, "backup", res.ID, "revision", res.Revision, "base", res.Synthetic.Base,
		"segments", res.Synthetic.Segments, "events", res.Events, "replay", res.Replay, "elapsed", res.Elapsed,
		"destinations", len(res.Backup.Succeeded()))
	return res, err
}

// checkEncryption refuses a synthetic full backup whose encryption is on
// where base's is off, or off where it is on, unless allowed.
func (c *Compactor) checkEncryption(base *backup.Manifest, allowed bool) error {
	encrypts := c.Pipeline.Encryption.Enabled()
	if allowed || encrypts == base.Encrypted() {
		return nil
	}
	if base.Encrypted() {
		return fmt.Errorf("%w: the full backup %s the chain starts from is encrypted (to %d recipients), the synthetic full backup would not be: give the recipients, or allow the change",
			ErrEncryptionChanged, base.ID, len(base.Encryption.Recipients))
	}
	return fmt.Errorf("%w: the full backup %s the chain starts from is not encrypted, the synthetic full backup would be: allow the change",
		ErrEncryptionChanged, base.ID)
}

// plan finds the full backup and the segments that reach the revision.
func (c *Compactor) plan(ctx context.Context, q Request) (*restore.PointPlan, error) {
	rev := q.ToRevision
	if rev == 0 {
		var err error
		if rev, err = LastRevision(ctx, q.Sources, q.Cluster); err != nil {
			return nil, err
		}
	}
	plan, err := restore.FindPoint(ctx, q.Sources, restore.Point{Cluster: q.Cluster, Revision: rev})
	if err != nil {
		return nil, err
	}
	if len(plan.Segments) == 0 {
		return nil, fmt.Errorf("%w: revision %d of %q is the full backup %s's", ErrNothingToCompact, rev, q.Cluster, plan.Full.ID)
	}
	return plan, nil
}

// LastRevision returns the last revision the newest chain of cluster
// committed on sources: what a restore with no point restores, and what
// Compact compacts to by default. It fails with ErrNothingToCompact when
// the newest restorable state is a full backup with no segment after it.
func LastRevision(ctx context.Context, sources []restore.Source, cluster string) (int64, error) {
	plan, err := restore.FindPoint(ctx, sources, restore.Point{Cluster: cluster, Time: time.Now()})
	if err != nil {
		return 0, err
	}
	if len(plan.Segments) == 0 {
		return 0, fmt.Errorf("%w: no delta segment of %q follows the full backup %s", ErrNothingToCompact, cluster, plan.Full.ID)
	}
	return plan.Segments[len(plan.Segments)-1].Manifest.LastRevision, nil
}

func (c *Compactor) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.New(slog.DiscardHandler)
}
