package schedule

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidJob matches every error of Job.Validate and of Set about
	// the job's definition. Errors about names match backup.ErrInvalidName
	// too, about the retention policy retention.ErrInvalidPolicy, and
	// about the schedule or time zone ErrInvalidSchedule or
	// ErrInvalidTimeZone (through a *ScheduleError).
	ErrInvalidJob = errors.New("invalid job")
	// ErrInvalidSchedule matches a *ScheduleError about a cron expression.
	ErrInvalidSchedule = errors.New("invalid schedule")
	// ErrInvalidTimeZone matches a *ScheduleError about a time zone.
	ErrInvalidTimeZone = errors.New("invalid time zone")
	// ErrInvalidConfig matches every error of Config.Validate.
	ErrInvalidConfig = errors.New("invalid scheduler config")
	// ErrRunning is returned by Start while the scheduler is already
	// running.
	ErrRunning = errors.New("scheduler already running")
	// ErrRunTimeout is the cause of a run cancelled at Config.RunTimeout:
	// the run's error (Status.LastError) matches it.
	ErrRunTimeout = errors.New("run exceeded its time limit")
)

// JobError reports a job that Set or Job.Validate refuses. It matches
// ErrInvalidJob; Err joins every problem found, each matching its own
// sentinel (backup.ErrInvalidName, retention.ErrInvalidPolicy,
// ErrInvalidSchedule, ...).
type JobError struct {
	// ID is the job's ID as given.
	ID  string
	Err error
}

// Error describes the job and every problem found.
func (e *JobError) Error() string {
	return fmt.Sprintf("invalid job %s: %v", quoteID(e.ID), e.Err)
}

// Unwrap returns the problems found.
func (e *JobError) Unwrap() error { return e.Err }

// Is matches ErrInvalidJob.
func (e *JobError) Is(target error) bool { return target == ErrInvalidJob }

// The fields a ScheduleError may be about.
const (
	FieldSchedule = "schedule"
	FieldTimeZone = "time zone"
)

// ScheduleError reports a cron expression or a time zone that cannot be
// used. It matches ErrInvalidJob, and ErrInvalidSchedule or
// ErrInvalidTimeZone according to Field.
type ScheduleError struct {
	// Field is FieldSchedule or FieldTimeZone.
	Field string
	// Value is the expression or the time zone.
	Value string
	// Err is the parser's reason.
	Err error
}

// Error names the field, its value and the reason.
func (e *ScheduleError) Error() string {
	return fmt.Sprintf("invalid %s %q: %v", e.Field, e.Value, e.Err)
}

// Unwrap returns the parser's reason.
func (e *ScheduleError) Unwrap() error { return e.Err }

// Is matches ErrInvalidJob and the sentinel of the field.
func (e *ScheduleError) Is(target error) bool {
	switch target {
	case ErrInvalidJob:
		return true
	case ErrInvalidSchedule:
		return e.Field == FieldSchedule
	case ErrInvalidTimeZone:
		return e.Field == FieldTimeZone
	}
	return false
}
