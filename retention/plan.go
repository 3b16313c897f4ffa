package retention

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
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
	Cluster string
	Policy  Policy
	Now     time.Time
	// Options are the options the plan was made with, defaults filled in:
	// a ChainPolicy applied to the plan keeps to the same scope and clocks.
	Options   PlanOptions
	Decisions []Decision
}

// Misdated returns the decisions of backups whose creation time the plan
// did not trust (see PlanOptions.ClockSkew): kept, and counted by no rule.
func (p *Plan) Misdated() []Decision {
	var out []Decision
	for _, d := range p.Decisions {
		if strings.HasPrefix(d.Reason, reasonMisdatedPrefix) {
			out = append(out, d)
		}
	}
	return out
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

	// Scope, when set, scopes the policy further to the backups whose
	// manifest it accepts; the others are kept by the plan, out of its
	// scope. A replication job's retention counts only the copies it can
	// prove it made (replicate.IsCopy).
	Scope func(*backup.Manifest) bool

	// Kind is the kind of backup the policy counts: backup.KindBackup
	// (snapshots; the zero value means it), backup.KindKeysJSON or
	// backup.KindKeys (logical backups). Kinds are never counted together,
	// not even the two logical ones: the other kinds are kept by the plan,
	// out of its scope.
	Kind backup.Kind

	// ClockSkew is how far a manifest's creation time may run ahead of now,
	// or ahead of the store's modification time of the manifest (see
	// ModTimes), before the plan stops trusting it; a backup completed
	// more than OrphanGrace (the longest upload) and ClockSkew before the
	// store wrote its manifest is not trusted either. A backup dated
	// beyond them is kept and counted by no rule, so that a writer whose
	// clock runs fast never pushes correctly dated backups out, and one
	// whose clock runs slow never has its backups deleted as old; the plan
	// reports it (Plan.Misdated). Zero means DefaultClockSkew.
	ClockSkew time.Duration

	// Copies, when set, tells the backups copied onto the store as they
	// were stored elsewhere (replicate.IsCopy): a copy's manifest keeps
	// its source's times while the store dates it by the copy, any time
	// later (a new target seeded with a month of backups, a target down
	// for days). A copy that records when the source's store wrote its
	// manifest (backup.Manifest.SourceStored) has its dates checked
	// against that time, with the same tolerances, instead of against
	// the store's; it is still misdated when dated after now or after
	// this store wrote it, and one recording a time after this store wrote
	// it (no source's store wrote it later than its copy) is dated by
	// this store's time. A copy without that record (an older
	// version's) and every other backup keep the checks against this
	// store's time: one written long after its backup is kept, counted
	// by no rule, since nothing proves its dates.
	Copies func(*backup.Manifest) bool

	// ModTimes holds the store's modification times of the folder's
	// objects, by key, as the listing gave them: the store's clock, which
	// no writer's clock moves. They cross-check the manifests' creation
	// times and age orphans: an orphan is old only by both the plan's now
	// and the newest modification time seen. Nil trusts now alone.
	ModTimes map[string]time.Time

	// AgeAtNow ages backups (max-age, keep-within, the point-in-time
	// window) at the plan's now alone, never at the store's newest
	// modification time when that is earlier; ModTimes still check the
	// dates. A copy's selection (replicate.Selection) plans over its
	// source's times and must age as far as the target's prune, whose
	// store wrote the copies later, so that it never selects what that
	// prune deletes.
	AgeAtNow bool
}

// DefaultClockSkew is the default PlanOptions.ClockSkew.
const DefaultClockSkew = 15 * time.Minute

// DefaultOrphanGrace is the default PlanOptions.OrphanGrace: longer than
// any upload runs.
const DefaultOrphanGrace = 24 * time.Hour

// Reasons shared by plans, for callers that match on them.
const (
	ReasonNewest     = "newest backup: always kept"
	ReasonLegacy     = "legacy object: never deleted by retention"
	ReasonForeign    = "not written by etcdbackup: never deleted by retention"
	ReasonInvalid    = "unreadable or inconsistent manifest: kept for inspection"
	ReasonDelta      = "delta segment: kept unless a point-in-time policy applies"
	ReasonOutOfScope = "out of the policy's scope (PlanOptions.Scope): never deleted by it"
	// ReasonFuture and ReasonAfterStore keep a backup whose manifest is
	// dated beyond the clock skew: after now, or after the store wrote
	// the manifest (the writer's clock ran fast, or the store's runs
	// slow). Such a backup is counted by no keep rule.
	ReasonFuture     = reasonMisdatedPrefix + "created after now beyond the clock skew: kept, counted by no rule"
	ReasonAfterStore = reasonMisdatedPrefix + "created after the store wrote its manifest, beyond the clock skew: kept, counted by no rule"
	// ReasonBeforeStore keeps a backup whose manifest is dated further
	// before the store wrote it than an upload takes (the orphan grace)
	// and the clock skew: the writer's clock ran slow, or the bucket was
	// copied and the store's times are the copy's. Its age cannot be told,
	// so no age rule deletes it.
	ReasonBeforeStore = reasonMisdatedPrefix + "completed long before the store wrote its manifest: kept, counted by no rule"
	// ReasonNewestRevision keeps the backup with the highest revision,
	// whatever its manifest's date says.
	ReasonNewestRevision = "newest backup by revision: always kept"
	// ReasonClaimed keeps a data object without a readable manifest whose
	// manifest exists: it may be a backup this version cannot read (a
	// newer manifest format), never an orphan. It keeps the data object an
	// inconsistent manifest names too.
	ReasonClaimed = "data object of a manifest that exists but cannot be read: kept with it"
)

// reasonMisdatedPrefix starts the reason of a backup the plan did not
// trust the date of.
const reasonMisdatedPrefix = "misdated: "

// MakePlan decides, for the entries of one cluster's folder, what policy
// keeps and what it deletes at now. It is a pure function: it reads no
// store and no clock. Whatever the policy, the plan keeps the newest valid
// backup (by creation time, and by revision), every legacy, foreign and
// invalid entry and the data object of every manifest that exists, and
// deletes nothing of another cluster; orphans (data objects without a
// manifest) older than the grace period are deleted. Backups are ordered
// by their manifests' creation time, never by modification time; one
// dated beyond the clock skew is kept and counted by no rule.
func MakePlan(cluster string, entries []backup.Entry, policy Policy, now time.Time, opts PlanOptions) (*Plan, error) {
	opts, err := checkPlan(cluster, policy, opts)
	if err != nil {
		return nil, err
	}
	plan := &Plan{Cluster: cluster, Policy: policy, Now: now, Options: opts, Decisions: make([]Decision, len(entries))}
	// Keys of the manifests that could not be read: the data objects they
	// name, by the same stem, are theirs. A readable manifest claims its
	// data object by name in the catalog already.
	unreadable := map[string]bool{}
	// Data objects named by a manifest read but inconsistent (it names a
	// data object which is not its own): kept with it.
	named := map[string]bool{}
	for _, e := range entries {
		if e.Kind == backup.KindInvalid && e.ManifestKey != "" {
			unreadable[e.ManifestKey] = true
		}
		if e.Kind == backup.KindInvalid && e.Manifest != nil && e.Manifest.DataKey != "" {
			named[backup.ClusterPrefix(e.Cluster)+e.Manifest.DataKey] = true
		}
	}

	// Backups whose dates are trusted, and every backup of the scope.
	var backups, scoped []int
	for i, e := range entries {
		d := &plan.Decisions[i]
		d.Entry = e
		counted := e.Kind == backup.KindBackup || e.Kind.Logical()
		switch {
		case e.Cluster != cluster:
			d.Action, d.Reason = Keep, fmt.Sprintf("belongs to cluster %q: out of scope", e.Cluster)
		case counted && e.Manifest != nil && e.Kind != opts.Kind:
			d.Action, d.Reason = Keep, fmt.Sprintf("a %s backup: counted apart from %s backups", e.Kind, opts.Kind)
		case counted && e.Manifest != nil && opts.Name != "" && e.Manifest.Name != opts.Name:
			d.Action, d.Reason = Keep, fmt.Sprintf("backup of config %q: out of the scope of config %q", e.Manifest.Name, opts.Name)
		case counted && e.Manifest != nil && opts.Scope != nil && !opts.Scope(e.Manifest):
			d.Action, d.Reason = Keep, ReasonOutOfScope
		case counted && e.Manifest != nil:
			scoped = append(scoped, i)
			if reason := opts.misdated(e, now); reason != "" {
				d.Action, d.Reason = Keep, reason
				continue
			}
			backups = append(backups, i)
		case e.Kind == backup.KindDelta:
			d.Action, d.Reason = Keep, ReasonDelta
		case e.Kind == backup.KindLegacy:
			d.Action, d.Reason = Keep, ReasonLegacy
		case e.Kind == backup.KindOrphan && (unreadable[backup.ManifestKey(e.Key)] || named[e.Key]):
			d.Action, d.Reason = Keep, ReasonClaimed
		case e.Kind == backup.KindOrphan:
			d.Action, d.Reason = orphanDecision(e, now, latestExcept(opts.ModTimes, e.Key), opts.OrphanGrace)
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
		if c := cmp.Compare(revision(eb), revision(ea)); c != 0 {
			return c
		}
		return compareStrings(eb.Key, ea.Key)
	})
	if len(backups) > 0 {
		decideBackups(plan, entries, backups, policy, now)
	}
	// Trusted backups first, newest first: they win ties.
	var misdated []int
	for _, i := range scoped {
		if strings.HasPrefix(plan.Decisions[i].Reason, reasonMisdatedPrefix) {
			misdated = append(misdated, i)
		}
	}
	if i, ok := newestByRevision(entries, append(slices.Clone(backups), misdated...)); ok {
		keep(&plan.Decisions[i], ReasonNewestRevision)
	}
	return plan, nil
}

// ageNow is the now that ages backups (max-age, keep-within and the
// point-in-time window): the plan's now, or the newest modification time
// the store gave when that is earlier. A pruner whose clock runs fast
// then never ages backups by its clock alone.
func (p *Plan) ageNow() time.Time {
	if s := latest(p.Options.ModTimes); !p.Options.AgeAtNow && !s.IsZero() && s.Before(p.Now) {
		return s
	}
	return p.Now
}

// checkPlan validates the arguments of MakePlan and fills in the defaults
// of opts.
func checkPlan(cluster string, policy Policy, opts PlanOptions) (PlanOptions, error) {
	if err := policy.Validate(); err != nil {
		return opts, err
	}
	if err := backup.ValidateName("cluster", cluster); err != nil {
		return opts, err
	}
	if opts.OrphanGrace <= 0 {
		opts.OrphanGrace = DefaultOrphanGrace
	}
	if opts.ClockSkew <= 0 {
		opts.ClockSkew = DefaultClockSkew
	}
	if opts.Kind == "" {
		opts.Kind = backup.KindBackup
	}
	if opts.Kind != backup.KindBackup && !opts.Kind.Logical() {
		return opts, fmt.Errorf("%w: retention counts snapshots, keys-json or keys backups, not %s", ErrInvalidPolicy, opts.Kind)
	}
	if opts.Name != "" {
		if err := backup.ValidateName("backup", opts.Name); err != nil {
			return opts, err
		}
	}
	return opts, nil
}

// decideBackups decides the backups whose dates are trusted, ordered
// newest first.
func decideBackups(plan *Plan, entries []backup.Entry, backups []int, policy Policy, now time.Time) {
	keep := selectKept(entries, backups, policy, now, plan.ageNow())
	noRule := "selected by no keep rule of " + policy.String()
	maxAge := fmt.Sprintf("older than max-age %s", policy.MaxAge)
	for rank, i := range backups {
		d := &plan.Decisions[i]
		created := entries[i].Manifest.Created
		switch {
		case rank == 0:
			d.Action, d.Reason = Keep, ReasonNewest
		case policy.MaxAge > 0 && plan.ageNow().Sub(created) > policy.MaxAge:
			d.Action, d.Reason = Delete, maxAge
		case keep[i] != "":
			d.Action, d.Reason = Keep, keep[i]
		default:
			d.Action, d.Reason = Delete, noRule
		}
	}
}

// misdated returns the reason not to trust the creation time of e's
// manifest, or "" when it is trusted.
func (o PlanOptions) misdated(e backup.Entry, now time.Time) string {
	created := e.Manifest.Created
	if created.After(now.Add(o.ClockSkew)) {
		return ReasonFuture
	}
	mod, ok := o.ModTimes[e.ManifestKey]
	if !ok || mod.IsZero() {
		return ""
	}
	if created.After(mod.Add(o.ClockSkew)) {
		return ReasonAfterStore
	}
	if src := e.Manifest.SourceStored; !src.IsZero() && !src.After(mod.Add(o.ClockSkew)) && o.Copies != nil && o.Copies(e.Manifest) {
		// A copy: this store wrote it any time after its backup; the
		// source's store wrote it when its backup completed. Never after
		// this store wrote the copy: a copy recording a later time
		// (forged, or stores' clocks far apart) is dated by this store.
		if created.After(src.Add(o.ClockSkew)) {
			return ReasonAfterStore
		}
		mod = src
	}
	// Backdated: the store wrote the manifest long after the date in it,
	// while the pruner's clock agrees with the store's. When the pruner's
	// clock is as far behind the store's as the writer's (one host's
	// clock, or a store that restamps), the two agree with each other and
	// the dates are compared with the pruner's now as they are.
	slack := o.OrphanGrace + o.ClockSkew
	if mod.After(completed(e).Add(slack)) && !mod.After(now.Add(slack)) {
		return ReasonBeforeStore
	}
	return ""
}

// orphanDecision ages an orphan by the plan's now and by storeNow, the
// newest modification time the store gave to another object (zero when
// unknown), when that is after the orphan (see age): a pruner whose clock
// runs fast must not take an upload in flight for an old one, and the
// newest object of a quiet folder is still collected.
func orphanDecision(e backup.Entry, now, storeNow time.Time, grace time.Duration) (Action, string) {
	age := age(e.Created, now, storeNow)
	if age >= grace {
		return Delete, fmt.Sprintf("orphan data object %s old, past the %s grace period", age.Round(time.Second), grace)
	}
	return Keep, fmt.Sprintf("orphan data object within the %s grace period by the clocks of the pruner and the store (an upload may be running)", grace)
}

// newestByRevision returns the backup of scoped with the highest known
// revision: the newest state, whatever the dates say. Of equal revisions
// the first wins.
func newestByRevision(entries []backup.Entry, scoped []int) (int, bool) {
	best, found := 0, false
	for _, i := range scoped {
		if r := revision(entries[i]); r > 0 && (!found || r > revision(entries[best])) {
			best, found = i, true
		}
	}
	return best, found
}

// revision is the highest revision a backup's state may be at: what its
// manifest records (the upper bound when known), 0 when unknown.
func revision(e backup.Entry) int64 {
	if e.Manifest == nil {
		return 0
	}
	r := e.Manifest.Etcd.Revision
	return max(r.Low, r.High)
}

// latest returns the latest of the times, zero when there is none.
func latest(times map[string]time.Time) time.Time {
	var out time.Time
	for _, t := range times {
		if t.After(out) {
			out = t
		}
	}
	return out
}

// latestExcept returns the newest of times but that of key.
func latestExcept(times map[string]time.Time, key string) time.Time {
	var out time.Time
	for k, t := range times {
		if k != key && t.After(out) {
			out = t
		}
	}
	return out
}

// selectKept returns, per entry index, the first keep rule that selects it
// ("" for none). backups is ordered newest first.
func selectKept(entries []backup.Entry, backups []int, p Policy, now, ageNow time.Time) []string {
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
		if p.KeepWithin > 0 && ageNow.Sub(entries[i].Manifest.Created) < p.KeepWithin {
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
