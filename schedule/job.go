package schedule

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/etcdbackup/etcdbackup/backup"
	"github.com/etcdbackup/etcdbackup/retention"
)

// MaxIDLen is the longest job ID accepted: room for "namespace/name" of
// Kubernetes objects.
const MaxIDLen = 253

// Job is one backup schedule: which cluster, when, where to, how encoded,
// and what to keep. It is plain data; the scheduler copies it at Set.
type Job struct {
	// ID identifies the job in the scheduler, its status, logs, metrics
	// and locks: for instance the namespace and name of the object it
	// comes from. 1 to MaxIDLen bytes of UTF-8 without control characters.
	ID string

	// Schedule is a cron expression: five fields (minute hour
	// day-of-month month day-of-week), or six with a leading seconds
	// field, or a descriptor (@yearly, @monthly, @weekly, @daily,
	// @hourly, @every <duration> of at least 1s). Empty means one backup
	// as soon as possible and never again (a one-shot job).
	Schedule string
	// TimeZone is the IANA time zone the schedule is read in, such as
	// "Europe/Berlin". Empty means UTC. It does not apply to @every.
	TimeZone string

	// Cluster names the cluster whose etcd is backed up.
	Cluster string
	// Name is the backup name: a backup's ID is "<cluster>-<name>", with
	// "-<timestamp>" appended for runs of a schedule (see backup.BackupID).
	Name string
	// Destinations are the names of the destinations each backup is
	// written to: at least one, all different.
	Destinations []string

	// Compression of the stored bytes; zero means zstd.
	Compression backup.Compression
	// Encryption of the stored bytes; zero means none. It holds public
	// keys only.
	Encryption backup.Encryption
	// Retention says which of the cluster's backups to keep on each
	// destination after each successful run of a schedule; the zero
	// Policy keeps the last 20. One-shot jobs do not prune. It counts
	// the job's own backups only: those of its Name and Kind.
	Retention retention.Policy

	// Kind is the kind of backup the job takes: empty or
	// backup.KindBackup for an etcd snapshot, backup.KindKeysJSON for a
	// logical backup of the keys under Prefixes (see backup.KeysExporter),
	// backup.KindKeys for the same as a keys zip (see
	// backup.KeysZipWriter).
	Kind backup.Kind
	// Prefixes are the key prefixes a logical job exports; none means
	// every key. Only for the logical kinds (backup.Kind.Logical).
	Prefixes []string

	// Continuous, when set on a scheduled snapshot job, also backs the
	// cluster up continuously between the schedule's full backups: the
	// scheduler runs a backup.Follower for the job for as long as the job
	// is set and the scheduler runs (see Scheduler). The job's full
	// backups start its chains.
	Continuous *Continuous

	// Replicate, when set, makes the job a replication job: each run
	// copies the cluster's backups from Replicate.From to every one of
	// Destinations, as stored (see replicate.Copier), instead of taking a
	// backup, and the job's Retention then prunes the copies on the
	// targets, each kind apart (snapshots, keys-json and keys backups,
	// replicate.Kinds): the backups of every name that a copy committed there
	// (replicate.IsCopy), never what another job or a backup run fanned
	// out to a target wrote. A scheduled job copies only the backups its
	// Retention keeps among the source's (replicate.Selection.Retention),
	// so a prune's deletions are not copied back. Schedule, Cluster and
	// Name keep their meaning; Compression, Encryption, Kind, Prefixes and
	// Continuous do not apply and must be zero.
	Replicate *Replicate

	// continuousPeers names the other continuous jobs of the cluster when
	// the scheduler runs the job: their chains are not the job's to prune.
	continuousPeers []string
}

// Continuous configures the continuous backup of a job.
type Continuous struct {
	// Window is how far back every revision stays restorable: retention
	// keeps the segments and full backups it needs (retention.PointInTime).
	// Required, at least a minute.
	Window time.Duration
	// FlushInterval bounds how long a revision waits before its segment is
	// stored; zero means backup.DefaultFlushInterval.
	FlushInterval time.Duration
	// CompactInterval, when positive, compacts the job's chain into a
	// synthetic full backup (package compact) that often, while the job
	// follows its cluster: restore time then stays flat however long the
	// chain, and the schedule's full snapshots from etcd may be rare. A
	// compaction waits for a run slot and takes the job's lock as a run
	// does; one that finds no segment after the newest full backup does
	// nothing. Only a replica whose follower runs compacts, an interval
	// after the newest synthetic full backup the destinations hold. Zero
	// means never; otherwise at least a minute. The
	// scheduler's runner must be a CompactingRunner.
	CompactInterval time.Duration
}

// Replicate configures a replication job.
type Replicate struct {
	// From is the name of the destination the backups are copied from.
	// Required; not one of the job's Destinations.
	From string
	// Window copies the backups created within this long before each run
	// (and what their chains need); zero copies every backup. Either way
	// a scheduled job copies only what its Retention keeps (the zero
	// Retention keeps the last retention.DefaultKeepLast), so what its
	// prune deleted is not copied again.
	Window time.Duration
	// PointInTime, when positive, prunes the copied chains on the targets
	// by the rule of continuous backups (retention.PointInTime): every
	// revision of this window stays restorable from the copies, and a
	// copied delta segment no kept restore point needs is deleted, with
	// the job's Retention for the full backups. A scheduled job then
	// copies none of what that rule deletes (replicate.Selection's
	// PointInTime). Zero prunes copied chains whole (replicate.ChainRule):
	// a chain's copies are kept while its full backup is, or while the
	// chain reaches past the oldest full backup the Retention keeps (a
	// follower's live chain, whose full backup fell out of a keep-last),
	// and deleted with its full backup once it ends before that and the
	// target's store wrote none of it within the last hour
	// (retention.DefaultChainGrace), since a copy, this job's or
	// another's, may be extending it. Otherwise at least a minute.
	PointInTime time.Duration
	// Name, when set, scopes the job to the backups of one backup name:
	// it copies only those (replicate.Selection.Name) and its retention
	// counts and prunes only their copies (replicate.OfName), so that
	// each config replicated by its own job keeps its own retention on a
	// shared target. Empty: every name of the cluster. Copies record no
	// source, so Scheduler.Set refuses a replication job with a target
	// in common with another of its cluster unless both are scoped to a
	// name and the names differ: each would prune the other's copies.
	Name string
}

// backupKind returns the kind of the job's backups in a catalog.
func (j *Job) backupKind() backup.Kind {
	if j.Kind == "" {
		return backup.KindBackup
	}
	return j.Kind
}

// OneShot reports whether the job runs once, as soon as possible.
func (j *Job) OneShot() bool { return j.Schedule == "" }

// Validate checks every field of the job, without I/O.
func (j *Job) Validate() error {
	_, err := j.compile(loadLocation)
	return err
}

// compile validates the job and parses its schedule, loading time zones
// with load.
func (j *Job) compile(load func(string) (*time.Location, error)) (*cronSchedule, error) {
	var errs []error
	if err := validateID(j.ID); err != nil {
		errs = append(errs, err)
	}
	if err := backup.ValidateName("cluster", j.Cluster); err != nil {
		errs = append(errs, err)
	}
	if err := backup.ValidateName("backup", j.Name); err != nil {
		errs = append(errs, err)
	}
	if len(j.Destinations) == 0 {
		errs = append(errs, errors.New("no destination"))
	}
	for i, d := range j.Destinations {
		if err := backup.ValidateName("destination", d); err != nil {
			errs = append(errs, err)
		} else if slices.Contains(j.Destinations[:i], d) {
			errs = append(errs, fmt.Errorf("destination %s listed twice", d))
		}
	}
	if err := j.Compression.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := j.Encryption.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := j.Retention.Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, j.validateKind()...)
	errs = append(errs, j.validateReplicate()...)
	var sched *cronSchedule
	if j.Schedule != "" {
		loc, err := load(j.TimeZone)
		if err != nil {
			errs = append(errs, err)
		} else if sched, err = parseSchedule(j.Schedule, loc); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, &JobError{ID: j.ID, Err: errors.Join(errs...)}
	}
	return sched, nil
}

// validateKind checks Kind, Prefixes and Continuous.
func (j *Job) validateKind() []error {
	var errs []error
	switch j.backupKind() {
	case backup.KindBackup:
		if len(j.Prefixes) > 0 {
			errs = append(errs, errors.New("prefixes are for keys-json and keys jobs only"))
		}
	case backup.KindKeysJSON, backup.KindKeys:
		if j.Continuous != nil {
			errs = append(errs, fmt.Errorf("a %s job cannot be continuous", j.Kind))
		}
	default:
		errs = append(errs, fmt.Errorf("kind %q is not %q, %q or %q", j.Kind, backup.KindBackup, backup.KindKeysJSON, backup.KindKeys))
	}
	if c := j.Continuous; c != nil {
		if j.OneShot() {
			errs = append(errs, errors.New("a one-shot job cannot be continuous"))
		}
		if c.Window < time.Minute {
			errs = append(errs, fmt.Errorf("continuous backup window %v is under a minute", c.Window))
		}
		if c.FlushInterval < 0 {
			errs = append(errs, errors.New("negative flush interval"))
		}
		if c.CompactInterval < 0 || c.CompactInterval > 0 && c.CompactInterval < time.Minute {
			errs = append(errs, fmt.Errorf("compaction interval %v is not zero or at least a minute", c.CompactInterval))
		}
	}
	return errs
}

// validateReplicate checks Replicate and the fields it excludes.
func (j *Job) validateReplicate() []error {
	r := j.Replicate
	if r == nil {
		return nil
	}
	var errs []error
	if err := backup.ValidateName("destination", r.From); err != nil {
		errs = append(errs, fmt.Errorf("replicate from: %w", err))
	} else if slices.Contains(j.Destinations, r.From) {
		errs = append(errs, fmt.Errorf("destination %s is both the source and a target of the replication", r.From))
	}
	if r.Window < 0 {
		errs = append(errs, errors.New("negative replication window"))
	}
	if r.Name != "" {
		if err := backup.ValidateName("backup", r.Name); err != nil {
			errs = append(errs, fmt.Errorf("replicate name: %w", err))
		}
	}
	if r.PointInTime < 0 || r.PointInTime > 0 && r.PointInTime < time.Minute {
		errs = append(errs, errors.New("replication point-in-time window must be zero or at least a minute"))
	}
	if j.Kind != "" || len(j.Prefixes) > 0 || j.Continuous != nil || j.Compression != "" || len(j.Encryption.Recipients) > 0 {
		errs = append(errs, errors.New("a replication job copies backups as stored: it has no kind, prefixes, continuous backup, compression or encryption"))
	}
	return errs
}

// loadLocation loads an IANA time zone; empty means UTC.
func loadLocation(zone string) (*time.Location, error) {
	if zone == "" || zone == "UTC" {
		return time.UTC, nil
	}
	if zone == "Local" {
		// time.LoadLocation accepts it, but the host's local zone is an
		// accident of where it runs: a schedule must name its zone.
		return nil, &ScheduleError{Field: FieldTimeZone, Value: zone, Err: errors.New("name an IANA time zone")}
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, &ScheduleError{Field: FieldTimeZone, Value: zone, Err: err}
	}
	return loc, nil
}

func validateID(id string) error {
	switch {
	case id == "":
		return errors.New("empty ID")
	case len(id) > MaxIDLen:
		return fmt.Errorf("ID longer than %d bytes", MaxIDLen)
	case !utf8.ValidString(id):
		return errors.New("ID is not UTF-8")
	case strings.ContainsFunc(id, unicode.IsControl):
		return errors.New("ID has a control character")
	}
	return nil
}

// quoteID quotes an ID for messages, shortening hostile ones.
func quoteID(id string) string {
	if len(id) > MaxIDLen {
		id = id[:MaxIDLen] + "..."
	}
	return fmt.Sprintf("%q", id)
}

// clone returns a copy of j that shares no slice with it.
func (j Job) clone() Job {
	j.Destinations = slices.Clone(j.Destinations)
	j.Encryption.Recipients = slices.Clone(j.Encryption.Recipients)
	j.Prefixes = slices.Clone(j.Prefixes)
	if j.Continuous != nil {
		c := *j.Continuous
		j.Continuous = &c
	}
	if j.Replicate != nil {
		r := *j.Replicate
		j.Replicate = &r
	}
	return j
}

// equal reports whether two jobs are the same definition.
func (j *Job) equal(o *Job) bool {
	return j.ID == o.ID &&
		j.Schedule == o.Schedule && j.TimeZone == o.TimeZone &&
		j.Cluster == o.Cluster && j.Name == o.Name &&
		slices.Equal(j.Destinations, o.Destinations) &&
		j.Compression == o.Compression &&
		slices.Equal(j.Encryption.Recipients, o.Encryption.Recipients) &&
		policyEqual(j.Retention, o.Retention) &&
		j.backupKind() == o.backupKind() && slices.Equal(j.Prefixes, o.Prefixes) &&
		continuousEqual(j.Continuous, o.Continuous) &&
		(j.Replicate == nil) == (o.Replicate == nil) && (j.Replicate == nil || *j.Replicate == *o.Replicate)
}

func continuousEqual(a, b *Continuous) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// policyEqual compares policies, time zones by name: locations loaded
// twice are different pointers.
func policyEqual(a, b retention.Policy) bool {
	zone := func(l *time.Location) string {
		if l == nil {
			return "UTC"
		}
		return l.String()
	}
	za, zb := zone(a.Location), zone(b.Location)
	a.Location, b.Location = nil, nil
	return a == b && za == zb
}

// followKey identifies what a continuous backup of the job is made of: a
// change of it starts the backup again. It is empty for a job that is not
// continuous.
func (j *Job) followKey() string {
	if j.Continuous == nil {
		return ""
	}
	return fmt.Sprintf("%s\x00%s\x00%q\x00%v\x00%q\x00%+v", j.Cluster, j.Name, j.Destinations,
		j.Compression, j.Encryption.Recipients, *j.Continuous)
}

// timing identifies what decides when a job runs: a change of it
// reschedules the job.
func (j *Job) timing() string {
	if j.OneShot() {
		return ""
	}
	return j.Schedule + "\x00" + j.TimeZone
}
