package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// parser reads Job.Schedule: the five standard fields with an optional
// leading seconds field, or a descriptor (@hourly, @daily, @every 6h, ...).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// cronSchedule is a parsed Job.Schedule in its time zone. It computes the
// times a job fires, with the daylight saving rules of the package
// documentation on top of the parser's schedule.
type cronSchedule struct {
	// fields are the parsed fields of a field schedule (their Location is
	// not used); every is the interval of an @every schedule instead.
	fields cron.SpecSchedule
	every  time.Duration
	loc    *time.Location
	// wallClock is set when the hour field is fixed (not *): such a
	// schedule names times of day, which run once a day whatever daylight
	// saving does to them.
	wallClock bool
}

// parseSchedule parses expr in the time zone loc.
func parseSchedule(expr string, loc *time.Location) (*cronSchedule, error) {
	trimmed := strings.TrimSpace(expr)
	if strings.HasPrefix(trimmed, "TZ=") || strings.HasPrefix(trimmed, "CRON_TZ=") {
		return nil, &ScheduleError{Field: FieldSchedule, Value: expr, Err: errors.New("time zone inside the expression: set Job.TimeZone instead")}
	}
	s, err := parser.Parse(expr)
	if err != nil {
		return nil, &ScheduleError{Field: FieldSchedule, Value: expr, Err: err}
	}
	c := &cronSchedule{loc: loc}
	switch s := s.(type) {
	case *cron.SpecSchedule:
		c.fields = *s
		c.fields.Location = nil
		c.wallClock = s.Hour&starBit == 0
	case cron.ConstantDelaySchedule:
		// The parser rounds what it cannot do (a negative or sub-second
		// interval) up to one second; refuse those instead.
		d, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(trimmed, "@every")))
		if err != nil || d < time.Second {
			return nil, &ScheduleError{Field: FieldSchedule, Value: expr, Err: errors.New("@every needs an interval of at least 1s")}
		}
		c.every = s.Delay
	default:
		return nil, &ScheduleError{Field: FieldSchedule, Value: expr, Err: fmt.Errorf("unsupported schedule type %T", s)}
	}
	if c.next(time.Now()).IsZero() {
		return nil, &ScheduleError{Field: FieldSchedule, Value: expr, Err: errors.New("never fires")}
	}
	return c, nil
}

// starBit marks a cron field written with * (also */n): cron's own
// marker, which the parser sets and does not export.
const starBit = 1 << 63

// next returns the first time after t the schedule fires, in the
// schedule's time zone; zero when it never fires again (within the five
// years the parser looks ahead).
//
// A schedule whose hour field is * follows real time: it fires at every
// instant whose local time matches, so @hourly runs every real hour, 23
// times on the day the clocks go forward and 25 on the day they go back.
// A schedule with a fixed hour names times of day and runs them once:
// a time in the hour skipped by the change to summer time runs at the end
// of the gap (02:30 in Europe/Berlin runs at 03:00 summer time that day),
// and a time in the hour repeated by the change back runs only the first
// time (summer time) that hour comes.
//
// The zone's history is cut into spans of a constant UTC offset, and the
// parsed fields are matched within each span in a fixed zone of that
// offset, where no hour is skipped or repeated: the parser's own Next
// steps through local hours and misses times in zones whose clocks move
// by half an hour.
func (c *cronSchedule) next(t time.Time) time.Time {
	if c.every > 0 {
		return everyNext(t, c.every).In(c.loc)
	}
	from := t.In(c.loc)
	for range 1000 {
		span := from.Add(time.Nanosecond)
		_, offset := span.Zone()
		_, end := span.ZoneBounds()
		fixed := c.fields
		fixed.Location = time.FixedZone("", offset)
		n := fixed.Next(from)
		if n.IsZero() {
			return time.Time{}
		}
		if end.IsZero() || n.Before(end) {
			n = n.In(c.loc)
			if c.wallClock && repeated(n) {
				from = n
				continue
			}
			return n
		}
		// Nothing matches before the span ends: the clocks change at end.
		if c.wallClock && c.skippedOver(end) {
			return end.In(c.loc)
		}
		from = end.Add(-time.Nanosecond)
	}
	return time.Time{}
}

// everyNext returns the first multiple of d since the Unix epoch after t.
// @every counts from that fixed origin, not from when a process started,
// so that every replica and every restart of the host computes the same
// ticks, and the job's Lock can tell one run per tick.
func everyNext(t time.Time, d time.Duration) time.Time {
	n, step := t.UnixNano(), int64(d)
	k := n / step
	if n < 0 && n%step != 0 {
		k-- // floor, for a time before the epoch
	}
	return time.Unix(0, (k+1)*step)
}

// skippedOver reports whether the clocks, going forward at the instant
// end, skipped over a wall-clock time the schedule names.
func (c *cronSchedule) skippedOver(end time.Time) bool {
	_, before := end.Add(-time.Nanosecond).Zone()
	_, after := end.Zone()
	gap := time.Duration(after-before) * time.Second
	if gap <= 0 {
		return false
	}
	// The wall clock jumped from from to from+gap.
	from := time.Unix(end.Unix()+int64(before), 0).UTC()
	wall := c.fields
	wall.Location = time.UTC
	m := wall.Next(from.Add(-time.Second))
	return !m.IsZero() && m.Before(from.Add(gap))
}

// repeated reports whether t's local time was already shown once, before
// the clocks went back.
func repeated(t time.Time) bool {
	start, _ := t.ZoneBounds()
	if start.IsZero() {
		return false
	}
	_, before := start.Add(-time.Nanosecond).Zone()
	_, offset := t.Zone()
	shift := time.Duration(before-offset) * time.Second
	return shift > 0 && t.Sub(start) < shift
}
