//go:build !benchlean

package main

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// groupRun records one group of modes run to its end on one etcd size:
// the commit it measured, when, and in how many rounds. A run resumed
// with -resume runs only the groups its results do not record, so every
// group's rounds come from one sitting, and the report says when each
// group ran.
type groupRun struct {
	Size, Group       string
	Commit            string
	Started, Finished time.Time
	Rounds            int
}

// sourceCommit returns the commit of the checkout the bench runs in and
// whether its tracked and untracked files, the report and chart aside,
// are those of the commit. It returns "" when git cannot tell.
func sourceCommit() (commit string, clean bool) {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "", false
	}
	commit = strings.TrimSpace(string(out))
	// The whole checkout, wherever the bench runs in it.
	st, err := exec.Command("git", "status", "--porcelain", "--", ":/",
		":(top,exclude)BENCHMARKS.md", ":(top,exclude)BENCHMARKS.png").Output()
	if err != nil {
		return commit, false
	}
	return commit, len(strings.TrimSpace(string(st))) == 0
}

// resumable returns the saved results at path when a run with flags on
// machine m can continue them: the same commit, a clean checkout
// (sourceCommit), the same flags, the same machine (CPUs, memory, Go,
// etcd, MinIO and library versions), and not every step done
// (complete). Otherwise it returns nil and why not.
func resumable(path, commit string, clean bool, flags []string, m machine) (*results, string) {
	r, err := loadResults(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, "no saved results"
	case err != nil:
		return nil, err.Error()
	case commit == "" || !clean:
		return nil, "the checkout is not a clean commit"
	case r.Commit != commit:
		return nil, fmt.Sprintf("the saved results are of commit %.12s", r.Commit)
	case !slices.Equal(r.Flags, flags):
		return nil, fmt.Sprintf("the saved results were run with flags %q", r.Flags)
	case r.Machine != m:
		return nil, fmt.Sprintf("the saved results were measured on another machine or toolchain (%+v)", r.Machine)
	case r.complete():
		return nil, "the saved run is complete"
	}
	return r, ""
}

// complete reports whether r holds every step of make bench: the groups
// run to their end and the section of each subcommand. Until then a run
// of make bench continues r (with -resume), the steps it holds skipped:
// a step that adds a section of its own adds it here.
func (r *results) complete() bool {
	return !r.Finished.IsZero() && r.Continuous != nil && len(r.ContinuousRemote) > 0 &&
		r.PointRestore != nil && r.Replication != nil && r.Seed != nil && r.Recovery != nil
}

// groupDone reports whether r records group run to its end on size.
func (r *results) groupDone(size, group string) bool {
	return slices.ContainsFunc(r.Groups, func(g groupRun) bool { return g.Size == size && g.Group == group })
}

// dropUnfinished removes the samples of the groups r does not record as
// done: a group interrupted mid-way runs again whole.
func (r *results) dropUnfinished() int {
	group := map[string]string{}
	for _, m := range r.Modes {
		group[m.Name] = m.Group
	}
	n := len(r.Samples)
	r.Samples = slices.DeleteFunc(r.Samples, func(s sample) bool { return !r.groupDone(s.Size, group[s.Mode]) })
	return n - len(r.Samples)
}

// stepDone reports whether the results at path hold the section of a
// subcommand's step (found by get: when it started, its command and
// commit; zero when absent) of the same run, commit and command, so that a
// resumed `make bench` need not measure it again. A subcommand that adds a
// section of its own to the report takes -resume and asks this first.
func stepDone(path, command string, get func(*results) (started time.Time, cmd, commit string)) bool {
	commit, clean := sourceCommit()
	r, err := loadResults(path)
	return err == nil && clean && stepIn(r, commit, command, get)
}

// stepIn is stepDone on loaded results, at commit of a clean checkout.
func stepIn(r *results, commit, command string, get func(*results) (time.Time, string, string)) bool {
	started, cmd, c := get(r)
	return commit != "" && r.Commit == commit && !started.IsZero() && c == commit && cmd == command && !started.Before(r.Started)
}

// step returns what stepDone needs of p, zero for nil.
func (p *pitrReport) step() (time.Time, string, string) {
	if p == nil {
		return time.Time{}, "", ""
	}
	return p.Started, p.Command, p.Commit
}

// step returns what stepDone needs of c, zero for nil.
func (c *replicationReport) step() (time.Time, string, string) {
	if c == nil {
		return time.Time{}, "", ""
	}
	return c.Started, c.Command, c.Commit
}

// step returns what stepDone needs of p, zero for nil.
func (p *seedReport) step() (time.Time, string, string) {
	if p == nil {
		return time.Time{}, "", ""
	}
	return p.Started, p.Command, p.Commit
}

// step returns what stepDone needs of p, zero for nil.
func (p *recoveryReport) step() (time.Time, string, string) {
	if p == nil {
		return time.Time{}, "", ""
	}
	return p.Started, p.Command, p.Commit
}

// remoteStep returns what stepDone needs of pitr-remote's sections: the
// earliest of stores', zero when one of stores is missing.
func remoteStep(m map[string]*pitrReport, stores []string) (time.Time, string, string) {
	var first *pitrReport
	for _, name := range stores {
		p := m[name]
		if p == nil {
			return time.Time{}, "", ""
		}
		if first == nil || p.Started.Before(first.Started) {
			first = p
		}
	}
	return first.step()
}

// remoteStep is remoteStep of every store r's pitr-remote section holds.
func (r *results) remoteStep() (time.Time, string, string) {
	return remoteStep(r.ContinuousRemote, slices.Sorted(maps.Keys(r.ContinuousRemote)))
}

// sectionCommit says when a step's section p was measured at another
// commit than r's tables (a step run alone, as make bench-pitr does, adds
// its section to whatever results are saved), "" otherwise.
func sectionCommit(r *results, p *pitrReport) string {
	return stepCommit(r, p.step)
}

// stepCommit is sectionCommit of any step's section, found by step (zero
// when absent).
func stepCommit(r *results, step func() (time.Time, string, string)) string {
	started, _, commit := step()
	if started.IsZero() || (commit == r.Commit && r.Commit != "") {
		return ""
	}
	return fmt.Sprintf("Measured at commit %s, not the commit of the tables above (%s).\n\n", commitText(commit), commitText(r.Commit))
}

// withoutFlag returns args without the boolean flag name (-name, --name,
// -name=...).
func withoutFlag(args []string, name string) []string {
	return slices.DeleteFunc(slices.Clone(args), func(a string) bool {
		a = strings.TrimLeft(a, "-")
		return a == name || strings.HasPrefix(a, name+"=")
	})
}

// renderGroups writes when each group ran, at which commit and in how
// many rounds.
func renderGroups(r *results) string {
	if len(r.Groups) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("When each group of modes ran (a run resumed with `-resume` runs only the groups not yet done, each whole):\n\n| etcd | group | commit | ran | rounds |\n|---|---|---|---|--:|\n")
	for _, g := range r.Groups {
		fmt.Fprintf(&b, "| %s | %s | %s | %s to %s | %d |\n", g.Size, g.Group, shortCommit(g.Commit),
			g.Started.Format("2006-01-02 15:04"), g.Finished.Format("15:04 MST"), g.Rounds)
	}
	b.WriteString("\n")
	return b.String()
}

// startResults sets b.res: the saved results when cfg.resume and they
// can be continued (resumable), with the samples of unfinished groups
// dropped, else new ones, the saved results of an unfinished run then
// kept aside (keepUnfinished).
func (b *bench) startResults(cfg *config) error {
	commit, clean := sourceCommit()
	flags := benchFlags(cfg.args)
	path := filepath.Join(cfg.work, "results.json")
	fresh := newResults()
	if cfg.resume {
		r, why := resumable(path, commit, clean, flags, fresh.Machine)
		if r != nil {
			n := r.dropUnfinished()
			r.Finished, r.Resumed = time.Time{}, append(r.Resumed, time.Now().UTC())
			b.res = r
			progress("resuming the run of commit %.12s started %s: %d groups done, %d samples of unfinished groups dropped", commit, r.Started.Format(time.RFC3339), len(r.Groups), n)
			return nil
		}
		progress("starting a new run (%s)", why)
		if err := keepUnfinished(path); err != nil {
			return err
		}
	}
	b.res = fresh
	b.res.Flags, b.res.RefRuns = flags, cfg.refRuns
	if clean {
		b.res.Commit = commit
	}
	if len(flags) > 0 {
		b.res.Command = "make bench BENCH_FLAGS='" + strings.Join(flags, " ") + "'"
	}
	for _, m := range cfg.modes {
		b.res.Modes = append(b.res.Modes, modeInfo{Name: m.name, Label: m.label, Short: m.short, Group: m.group, Reference: m.reference, Source: m.source})
	}
	return nil
}

// keepUnfinished renames the results at path, when they are of an
// unfinished run, to results-<start>.json next to them: a new run saves
// over results.json at its first sample, and the groups a run took hours
// to measure must not go because -resume could not continue them (a file
// left in the checkout, another commit).
func keepUnfinished(path string) error {
	r, err := loadResults(path)
	if err != nil || r.complete() {
		return nil
	}
	kept := filepath.Join(filepath.Dir(path), "results-"+r.Started.UTC().Format("20060102T150405Z")+".json")
	if err := os.Rename(path, kept); err != nil {
		return fmt.Errorf("keep the unfinished run's results: %w", err)
	}
	progress("the unfinished run's results are kept in %s", kept)
	return nil
}

// sizeIndex returns the index of the size labelled label in b.res.Sizes,
// -1 when it has none.
func (b *bench) sizeIndex(label string) int {
	return slices.IndexFunc(b.res.Sizes, func(s sizeInfo) bool { return s.Label == label })
}

// sizeDone reports whether every group of b's modes is done on size.
func (b *bench) sizeDone(size int64) bool {
	for _, g := range b.groupsOn(size) {
		if !b.res.groupDone(formatBytes(size), g[0].group) {
			return false
		}
	}
	return true
}

// cleanCommit returns the commit of a clean checkout, "" otherwise.
func cleanCommit() string {
	if commit, clean := sourceCommit(); clean {
		return commit
	}
	return ""
}

// commitText names a commit in the report.
func commitText(commit string) string {
	if commit == "" {
		return "not recorded: the checkout had changes not committed"
	}
	return commit
}

// shortCommit abbreviates a commit for a table, "(changes)" for none.
func shortCommit(commit string) string {
	if commit == "" {
		return "(changes)"
	}
	return commit[:min(12, len(commit))]
}

// groupsOn returns the groups of b's modes that run on size: the
// remote-store groups only on cfg.remoteSizes.
func (b *bench) groupsOn(size int64) [][]mode {
	return slices.DeleteFunc(groupModes(b.cfg.modes), func(g []mode) bool {
		return g[0].store != "" && !slices.Contains(b.cfg.remoteSizes, size)
	})
}

// dateText writes when the run started and took, and when it was
// resumed: the time from start to end then includes the pauses.
func dateText(r *results) string {
	if len(r.Resumed) == 0 {
		return fmt.Sprintf("%s, %s in all", r.Started.Format("2006-01-02"), r.Finished.Sub(r.Started).Round(time.Second))
	}
	var at []string
	for _, t := range r.Resumed {
		at = append(at, t.Format("2006-01-02 15:04"))
	}
	return fmt.Sprintf("started %s, resumed %s, finished %s (when each group ran is below)",
		r.Started.Format("2006-01-02 15:04"), strings.Join(at, ", "), r.Finished.Format("2006-01-02 15:04 MST"))
}
