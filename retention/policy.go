package retention

import (
	"errors"
	"fmt"
	"time"
)

// DefaultKeepLast is the number of backups kept when a Policy is empty: the
// last 20, as cron-job backups have always kept.
const DefaultKeepLast = 20

// Policy says which backups of a cluster to keep. A backup is kept when any
// keep rule selects it (KeepLast, KeepWithin, or one of the calendar rules);
// MaxAge then removes what is older than it, whatever the keep rules say.
// The newest valid backup is kept in every case.
//
// The zero Policy keeps the last DefaultKeepLast backups.
type Policy struct {
	// KeepLast keeps the N newest backups.
	KeepLast int
	// KeepWithin keeps every backup younger than this.
	KeepWithin time.Duration

	// The calendar rules keep the newest backup of each of the last N
	// calendar hours, days, ISO weeks and months, counting back from now
	// with the current period included: Hours 24, Days 7, Weeks 4 and
	// Months 12 is the classic grandfather-father-son scheme. Periods
	// without a backup count too, so an outage does not stretch a rule
	// back in time.
	Hours, Days, Weeks, Months int
	// Location sets the calendar of the rules above; nil means UTC.
	Location *time.Location

	// MaxAge deletes backups older than this, even those a keep rule
	// selected. Zero means no limit.
	MaxAge time.Duration
}

// ErrInvalidPolicy matches every error of Policy.Validate.
var ErrInvalidPolicy = errors.New("invalid retention policy")

// Validate reports negative counts and durations, and a MaxAge that would
// defeat KeepWithin.
func (p Policy) Validate() error {
	for _, f := range []struct {
		name string
		n    int
	}{{"keep-last", p.KeepLast}, {"hours", p.Hours}, {"days", p.Days}, {"weeks", p.Weeks}, {"months", p.Months}} {
		if f.n < 0 {
			return fmt.Errorf("%w: %s is negative (%d)", ErrInvalidPolicy, f.name, f.n)
		}
	}
	if p.KeepWithin < 0 || p.MaxAge < 0 {
		return fmt.Errorf("%w: negative duration", ErrInvalidPolicy)
	}
	if p.MaxAge > 0 && p.KeepWithin > p.MaxAge {
		return fmt.Errorf("%w: keep-within %s is longer than max-age %s", ErrInvalidPolicy, p.KeepWithin, p.MaxAge)
	}
	return nil
}

// empty reports whether no keep rule is set.
func (p Policy) empty() bool {
	return p.KeepLast == 0 && p.KeepWithin == 0 && p.Hours == 0 && p.Days == 0 && p.Weeks == 0 && p.Months == 0
}

// KeepLast returns a Policy that keeps the n newest backups.
func KeepLast(n int) Policy { return Policy{KeepLast: n} }

// GFS returns the classic grandfather-father-son Policy: the newest backup
// of each of the last 24 hours, 7 days, 4 weeks and the given number of
// months.
func GFS(months int) Policy { return Policy{Hours: 24, Days: 7, Weeks: 4, Months: months} }

// String describes the policy in a line, for logs and events.
func (p Policy) String() string {
	if p.empty() && p.MaxAge == 0 {
		return fmt.Sprintf("keep-last=%d (default)", DefaultKeepLast)
	}
	s := ""
	add := func(format string, args ...any) {
		if s != "" {
			s += " "
		}
		s += fmt.Sprintf(format, args...)
	}
	if p.KeepLast > 0 {
		add("keep-last=%d", p.KeepLast)
	}
	if p.KeepWithin > 0 {
		add("keep-within=%s", p.KeepWithin)
	}
	for _, f := range []struct {
		name string
		n    int
	}{{"hours", p.Hours}, {"days", p.Days}, {"weeks", p.Weeks}, {"months", p.Months}} {
		if f.n > 0 {
			add("%s=%d", f.name, f.n)
		}
	}
	if p.MaxAge > 0 {
		add("max-age=%s", p.MaxAge)
	}
	return s
}
