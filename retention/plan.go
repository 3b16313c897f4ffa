package retention

import (
	"fmt"
	"slices"
	"time"

	"github.com/etcdbackup/etcdbackup/backup"
)

// Action is what a plan does with one entry.
type Action string

// The actions of a plan.
const (
	Keep   Action = "keep"
	Delete Action = "delete"
)

// Decision is the plan for one entry of a cluster's folder, with the reason
// for it, fit for events and logs.
type Decision struct {
	Entry  backup.Entry
	Action Action
	Reason string
}

// Plan is the outcome of planning: one decision per entry, in the order of
// the entries given (oldest first, as backup.ListBackups returns them).
type Plan struct {
	Cluster   string
	Policy    Policy
	Now       time.Time
	Decisions []Decision
}

// Deletes returns the decisions to delete.
func (p *Plan) Deletes() []Decision {
	var out []Decision
	for _, d := range p.Decisions {
		if d.Action == Delete {
			out = append(out, d)
		}
	}
	return out
}

// PlanOptions tunes what a plan does with entries that are not backups.
type PlanOptions struct {
	// OrphanGrace is how old a data object without a manifest must be
	// before the plan deletes it: younger ones may be uploads in flight.
	// Zero means DefaultOrphanGrace.
	OrphanGrace time.Duration

	// Name, when set, scopes the policy to the backups of one backup
	// config: those whose manifest records this backup name. Every config
	// of a cluster keeps its own count (an hourly config's keep-5 and a
	// daily config's keep-1 never prune each other), and the newest backup
	// of each config is kept. Backups of other configs are kept by the plan
	// (out of its scope). Empty plans over every backup of the cluster.
	Name string

	// Kind is the kind of backup the policy counts: backup.KindBackup
	// (snapshots; the zero value means it) or backup.KindKeysJSON (logical
	// backups). Kinds are never counted together: the other kinds are kept
	// by the plan, out of its scope.
	Kind backup.Kind
}

// DefaultOrphanGrace is the default PlanOptions.OrphanGrace: longer than
// any upload runs.
const DefaultOrphanGrace = 24 * time.Hour

// Reasons shared by plans, for callers that match on them.
const (
	ReasonNewest  = "newest backup: always kept"
	ReasonLegacy  = "legacy object: never deleted by retention"
	ReasonForeign = "not written by etcdbackup: never deleted by retention"
	ReasonInvalid = "unreadable or inconsistent manifest: kept for inspection"
	ReasonFuture  = "created after now (clock skew): kept"
	ReasonDelta   = "delta segment: kept unless a point-in-time policy applies"
)

// MakePlan decides, for the entries of one cluster's folder, what policy
// keeps and what it deletes at now. It is a pure function: it reads no
// store and no clock. Whatever the policy, the plan keeps the newest valid
// backup and every legacy, foreign and invalid entry, and deletes nothing
// of another cluster; orphans (data objects without a manifest) older than
// the grace period are deleted. Entries are ordered by their manifests'
// creation time, never by modification time, except orphans which have no
// manifest.
func MakePlan(cluster string, entries []backup.Entry, policy Policy, now time.Time, opts PlanOptions) (*Plan, error) {
	if err := policy.Validate(); err != nil {
		return nil, err
	}
	if err := backup.ValidateName("cluster", cluster); err != nil {
		return nil, err
	}
	grace := opts.OrphanGrace
	if grace <= 0 {
		grace = DefaultOrphanGrace
	}
	kind := opts.Kind
	if kind == "" {
		kind = backup.KindBackup
	}
	if kind != backup.KindBackup && kind != backup.KindKeysJSON {
		return nil, fmt.Errorf("%w: retention counts snapshots or keys-json backups, not %s", ErrInvalidPolicy, kind)
	}
	if opts.Name != "" {
		if err := backup.ValidateName("backup", opts.Name); err != nil {
			return nil, err
		}
	}
	plan := &Plan{Cluster: cluster, Policy: policy, Now: now, Decisions: make([]Decision, len(entries))}

	// Backups, newest first, by index into entries.
	var backups []int
	for i, e := range entries {
		d := &plan.Decisions[i]
		d.Entry = e
		counted := e.Kind == backup.KindBackup || e.Kind == backup.KindKeysJSON
		switch {
		case e.Cluster != cluster:
			d.Action, d.Reason = Keep, fmt.Sprintf("belongs to cluster %q: out of scope", e.Cluster)
		case counted && e.Manifest != nil && e.Kind != kind:
			d.Action, d.Reason = Keep, fmt.Sprintf("a %s backup: counted apart from %s backups", e.Kind, kind)
		case counted && e.Manifest != nil && opts.Name != "" && e.Manifest.Name != opts.Name:
			d.Action, d.Reason = Keep, fmt.Sprintf("backup of config %q: out of the scope of config %q", e.Manifest.Name, opts.Name)
		case counted && e.Manifest != nil:
			backups = append(backups, i)
		case e.Kind == backup.KindDelta:
			d.Action, d.Reason = Keep, ReasonDelta
		case e.Kind == backup.KindLegacy:
			d.Action, d.Reason = Keep, ReasonLegacy
		case e.Kind == backup.KindOrphan:
			if age := now.Sub(e.Created); age >= grace {
				d.Action, d.Reason = Delete, fmt.Sprintf("orphan data object %s old, past the %s grace period", age.Round(time.Second), grace)
			} else {
				d.Action, d.Reason = Keep, fmt.Sprintf("orphan data object within the %s grace period (an upload may be running)", grace)
			}
		case e.Kind == backup.KindInvalid:
			d.Action, d.Reason = Keep, ReasonInvalid
		default:
			d.Action, d.Reason = Keep, ReasonForeign
		}
	}
	slices.SortStableFunc(backups, func(a, b int) int {
		ea, eb := entries[a], entries[b]
		if c := eb.Manifest.Created.Compare(ea.Manifest.Created); c != 0 {
			return c
		}
		return compareStrings(eb.Key, ea.Key)
	})
	if len(backups) == 0 {
		return plan, nil
	}

	keep := selectKept(entries, backups, policy, now)
	noRule := "selected by no keep rule of " + policy.String()
	maxAge := fmt.Sprintf("older than max-age %s", policy.MaxAge)
	for rank, i := range backups {
		d := &plan.Decisions[i]
		created := entries[i].Manifest.Created
		switch {
		case rank == 0:
			d.Action, d.Reason = Keep, ReasonNewest
		case created.After(now):
			d.Action, d.Reason = Keep, ReasonFuture
		case policy.MaxAge > 0 && now.Sub(created) > policy.MaxAge:
			d.Action, d.Reason = Delete, maxAge
		case keep[i] != "":
			d.Action, d.Reason = Keep, keep[i]
		default:
			d.Action, d.Reason = Delete, noRule
		}
	}
	return plan, nil
}

// selectKept returns, per entry index, the first keep rule that selects it
// ("" for none). backups is ordered newest first.
func selectKept(entries []backup.Entry, backups []int, p Policy, now time.Time) []string {
	keep := make([]string, len(entries))
	mark := func(i int, reason string) {
		if keep[i] == "" {
			keep[i] = reason
		}
	}
	if p.MaxAge > 0 && p.empty() {
		// Only a maximum age: everything younger than it is wanted.
		p.KeepWithin = p.MaxAge
	} else if p.empty() {
		p.KeepLast = DefaultKeepLast
	}
	within := fmt.Sprintf("keep-within %s", p.KeepWithin)
	for rank, i := range backups {
		if rank < p.KeepLast {
			mark(i, fmt.Sprintf("keep-last %d: number %d", p.KeepLast, rank+1))
		}
		if p.KeepWithin > 0 && now.Sub(entries[i].Manifest.Created) < p.KeepWithin {
			mark(i, within)
		}
	}
	loc := p.Location
	if loc == nil {
		loc = time.UTC
	}
	for _, rule := range []struct {
		name  string
		n     int
		start func(time.Time) time.Time // the start of t's period
		back  func(time.Time, int) time.Time
	}{
		{"hourly", p.Hours, startOfHour, func(t time.Time, n int) time.Time { return t.Add(-time.Duration(n) * time.Hour) }},
		{"daily", p.Days, startOfDay, func(t time.Time, n int) time.Time { return t.AddDate(0, 0, -n) }},
		{"weekly", p.Weeks, startOfISOWeek, func(t time.Time, n int) time.Time { return t.AddDate(0, 0, -7*n) }},
		{"monthly", p.Months, startOfMonth, func(t time.Time, n int) time.Time { return t.AddDate(0, -n, 0) }},
	} {
		if rule.n <= 0 {
			continue
		}
		// The oldest period the rule covers starts n-1 periods before the
		// current one.
		oldest := rule.start(rule.back(rule.start(now.In(loc)), rule.n-1))
		var last time.Time // newest first: the first backup of a period wins it
		for _, i := range backups {
			created := entries[i].Manifest.Created
			if created.After(now) {
				continue
			}
			if created.Before(oldest) {
				break // older ones are all out of range
			}
			period := rule.start(created.In(loc))
			if period.Equal(last) {
				continue
			}
			last = period
			mark(i, fmt.Sprintf("%s: newest of %s", rule.name, period.Format(time.RFC3339)))
		}
	}
	return keep
}

// startOfHour truncates absolute time, so that the two local hours of a
// daylight-saving fall-back stay two periods.
func startOfHour(t time.Time) time.Time { return t.Truncate(time.Hour) }

func startOfDay(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, t.Location())
}

func startOfISOWeek(t time.Time) time.Time {
	day := startOfDay(t)
	offset := (int(day.Weekday()) + 6) % 7 // Monday is 0
	return day.AddDate(0, 0, -offset)
}

func startOfMonth(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, t.Location())
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
