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
	// Policy keeps the last 20. One-shot jobs do not prune.
	Retention retention.Policy
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
		policyEqual(j.Retention, o.Retention)
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

// timing identifies what decides when a job runs: a change of it
// reschedules the job.
func (j *Job) timing() string {
	if j.OneShot() {
		return ""
	}
	return j.Schedule + "\x00" + j.TimeZone
}
