//go:build !benchlean

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestResumable continues only an unfinished run of the same clean commit
// and flags, and keeps only the samples of the groups it finished.
func TestResumable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.json")
	flags := []string{"-sizes", "1GiB"}
	mach := machine{CPUs: 2, CPUModel: "cpu", MemoryBytes: 8 << 30, GoVersion: "go1", OS: "linux/amd64", EtcdVersion: "3.6", MinIO: "m1", Library: "v1"}
	r := &results{Commit: "abc", Flags: flags, Started: time.Now().UTC(), Machine: mach,
		Modes:   []modeInfo{{Name: "a", Group: "backup"}, {Name: "f", Group: "restore"}},
		Groups:  []groupRun{{Size: "1 GiB", Group: "backup", Commit: "abc", Rounds: 5}},
		Samples: []sample{{Size: "1 GiB", Mode: "a", Run: 1}, {Size: "1 GiB", Mode: "f", Run: 1}, {Size: "2 GiB", Mode: "a", Run: 1}}}
	if err := r.save(path); err != nil {
		t.Fatal(err)
	}
	if got, why := resumable(path, "abc", true, flags, mach); got == nil {
		t.Fatalf("an unfinished run of the same commit is not resumed: %s", why)
	} else if n := got.dropUnfinished(); n != 2 || len(got.Samples) != 1 || got.Samples[0].Mode != "a" || got.Samples[0].Size != "1 GiB" {
		t.Errorf("dropped %d, kept %+v; want only the finished group's sample", n, got.Samples)
	}
	for name, tc := range map[string]struct {
		commit  string
		clean   bool
		flags   []string
		machine func(*machine)
	}{
		"another commit":  {"def", true, flags, nil},
		"changes":         {"abc", false, flags, nil},
		"no git":          {"", false, flags, nil},
		"other flags":     {"abc", true, []string{"-sizes", "2GiB"}, nil},
		"another machine": {"abc", true, flags, func(m *machine) { m.CPUs, m.MemoryBytes = 4, 16<<30 }},
		"another Go":      {"abc", true, flags, func(m *machine) { m.GoVersion = "go2" }},
		"another MinIO":   {"abc", true, flags, func(m *machine) { m.MinIO = "m2" }},
	} {
		m := mach
		if tc.machine != nil {
			tc.machine(&m)
		}
		if got, _ := resumable(path, tc.commit, tc.clean, tc.flags, m); got != nil {
			t.Errorf("%s: resumed", name)
		}
	}
	// Interrupted after the groups, pitr and pitr-restore: the later
	// steps of make bench continue the same run.
	r.Finished, r.Continuous, r.PointRestore = time.Now(), &pitrReport{}, &pitrReport{}
	if err := r.save(path); err != nil {
		t.Fatal(err)
	}
	if got, why := resumable(path, "abc", true, flags, mach); got == nil {
		t.Errorf("a run without its pitr-remote, replicate and seed steps is not resumed: %s", why)
	}
	r.ContinuousRemote, r.Replication, r.Seed = map[string]*pitrReport{"tls": {}}, &replicationReport{}, &seedReport{}
	if err := r.save(path); err != nil {
		t.Fatal(err)
	}
	if got, why := resumable(path, "abc", true, flags, mach); got == nil {
		t.Errorf("a run without its recovery step is not resumed: %s", why)
	}
	r.Recovery = &recoveryReport{}
	if err := r.save(path); err != nil {
		t.Fatal(err)
	}
	if got, _ := resumable(path, "abc", true, flags, mach); got != nil {
		t.Error("a complete run is resumed")
	}
	if got, _ := resumable(filepath.Join(t.TempDir(), "none.json"), "abc", true, flags, mach); got != nil {
		t.Error("resumed without results")
	}
}

// TestGroupsOn runs the remote-store groups on -remote-sizes only.
func TestGroupsOn(t *testing.T) {
	b := &bench{cfg: &config{modes: modes, remoteSizes: []int64{1 << 30}}}
	remote := func(gs [][]mode) int {
		return len(slices.DeleteFunc(slices.Clone(gs), func(g []mode) bool { return g[0].store == "" }))
	}
	if n := remote(b.groupsOn(256 << 20)); n != 0 {
		t.Errorf("%d remote-store groups on 256 MiB, want none", n)
	}
	if n := remote(b.groupsOn(1 << 30)); n != 2*len(remoteStores) {
		t.Errorf("%d remote-store groups on 1 GiB, want %d", n, 2*len(remoteStores))
	}
	if n := len(b.groupsOn(256<<20)) + 2*len(remoteStores); n != len(groupModes(modes)) {
		t.Errorf("groups on 256 MiB and the remote ones: %d, want every group (%d)", n, len(groupModes(modes)))
	}
}

// TestRenderGroups says when each group ran and at which commit.
func TestRenderGroups(t *testing.T) {
	at := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	r := &results{Groups: []groupRun{
		{Size: "1 GiB", Group: "backup", Commit: "0123456789abcdef", Started: at, Finished: at.Add(20 * time.Minute), Rounds: 6},
		{Size: "1 GiB", Group: "restore", Started: at, Finished: at, Rounds: 10},
	}}
	got := renderGroups(r)
	for _, w := range []string{"| 1 GiB | backup | 0123456789ab | 2026-11-27 06:00 to 06:20 UTC | 6 |", "| 1 GiB | restore | (changes) |"} {
		if !strings.Contains(got, w) {
			t.Errorf("groups table lacks %q:\n%s", w, got)
		}
	}
	r.Started, r.Finished = at, at.Add(3*time.Hour)
	if got := dateText(r); got != "2026-11-27, 3h0m0s in all" {
		t.Errorf("date %q", got)
	}
	r.Resumed = []time.Time{at.Add(2 * time.Hour)}
	if got := dateText(r); !strings.Contains(got, "resumed 2026-11-27 08:00") || strings.Contains(got, "in all") {
		t.Errorf("date of a resumed run %q", got)
	}
	if renderGroups(&results{}) != "" {
		t.Error("a table without groups")
	}
}

func TestWithoutFlag(t *testing.T) {
	got := withoutFlag([]string{"-resume", "-full", "0", "--resume=true", "-resumes"}, "resume")
	if !slices.Equal(got, []string{"-full", "0", "-resumes"}) {
		t.Errorf("got %q", got)
	}
	if b := benchFlags([]string{"-cli", "x", "-resume", "-runs", "1"}); !slices.Equal(b, []string{"-runs", "1"}) {
		t.Errorf("bench flags %q", b)
	}
}

// TestStepIn skips a subcommand's step only when the saved results hold
// it from the same run, commit and command.
func TestStepIn(t *testing.T) {
	at := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	r := &results{Commit: "abc", Started: at, Continuous: &pitrReport{Started: at.Add(time.Hour), Command: "make bench", Commit: "abc"}}
	get := func(r *results) (time.Time, string, string) { return r.Continuous.step() }
	if !stepIn(r, "abc", "make bench", get) {
		t.Error("the same run's step is measured again")
	}
	for name, tc := range map[string]struct {
		commit, command string
		mod             func(*results)
	}{
		"another commit":  {"def", "make bench", nil},
		"another command": {"abc", "make bench PITR_FLAGS='-full 0'", nil},
		"absent":          {"abc", "make bench", func(r *results) { r.Continuous = nil }},
		"an earlier run":  {"abc", "make bench", func(r *results) { r.Continuous.Started = at.Add(-time.Hour) }},
		"a dirty step":    {"abc", "make bench", func(r *results) { r.Continuous.Commit = "" }},
	} {
		c := *r
		p := *r.Continuous
		c.Continuous = &p
		if tc.mod != nil {
			tc.mod(&c)
		}
		if stepIn(&c, tc.commit, tc.command, get) {
			t.Errorf("%s: skipped", name)
		}
	}
}

// TestSaveKeepsResultsOnFailure keeps the results saved before when a
// save fails part-way (here at a file size limit, as on a full disk): the
// groups done must survive for -resume.
func TestSaveKeepsResultsOnFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.json")
	r := &results{Commit: "abc", Groups: []groupRun{{Size: "1 GiB", Group: "backup", Rounds: 5}}}
	if err := r.save(path); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		r.Samples = append(r.Samples, sample{Size: "1 GiB", Mode: "stream", Run: i})
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	small := lim
	small.Cur = uint64(st.Size()) + 100
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &small); err != nil {
		t.Skip("cannot set a file size limit:", err)
	}
	err = r.save(path)
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	if err == nil {
		t.Fatal("a save past the file size limit succeeded")
	}
	got, err := loadResults(path)
	if err != nil {
		t.Fatalf("the results saved before are lost: %v", err)
	}
	if len(got.Groups) != 1 || len(got.Samples) != 0 {
		t.Errorf("the results saved before changed: %+v", got)
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("files left next to the results: %v", ents)
	}
}

// TestRunCountsPerGroup says how many rounds each group ran in when the
// groups ran different numbers: rounds added to the judged groups are not
// claimed for the others.
func TestRunCountsPerGroup(t *testing.T) {
	r := &results{
		Sizes: []sizeInfo{{Label: "1 GiB", Runs: 7, RestoreRuns: 14}},
		Modes: []modeInfo{{Name: "a", Group: groupBackup}, {Name: "f", Group: groupRestore}, {Name: "a-tls", Group: "backup-tls"}, {Name: "f-tls", Group: "restore-tls"}},
		Groups: []groupRun{
			{Size: "1 GiB", Group: groupBackup, Rounds: 7}, {Size: "1 GiB", Group: "backup-tls", Rounds: 5},
			{Size: "1 GiB", Group: groupRestore, Rounds: 14}, {Size: "1 GiB", Group: "restore-tls", Rounds: 5},
		},
	}
	got := runCounts(r)
	for _, w := range []string{"in 7 rounds", "restore in 14", "backup-tls in 5", "restore-tls in 5"} {
		if !strings.Contains(got, w) {
			t.Errorf("run counts lack %q: %s", w, got)
		}
	}
}

// TestSectionOfAnotherCommit says so when a step's section was measured at
// another commit than the tables (make bench-pitr adds it to the saved
// results of any run).
func TestSectionOfAnotherCommit(t *testing.T) {
	r := loadFixture(t)
	r.Commit = fixtureCommit // every section's
	r.PointRestore.Commit = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	got, err := renderReport(r, "c.png")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(got, r.PointRestore.Commit) != 1 {
		t.Errorf("the report does not name once the other commit of the point restore:\n%s", got)
	}
	if strings.Count(got, "not the commit of the tables") != 1 {
		t.Errorf("want one section said to be of another commit")
	}
	r.Continuous.Commit = ""
	if got, _ = renderReport(r, "c.png"); strings.Count(got, "not the commit of the tables") != 2 {
		t.Errorf("a section of a checkout with changes is not said to be of another commit")
	}
}

// TestSourceCommitWholeCheckout finds changes anywhere in the checkout,
// not only under the directory the bench runs in, and ignores the report
// and chart at its top.
func TestSourceCommitWholeCheckout(t *testing.T) {
	dir := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.email=b@example.com", "-c", "user.name=b"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("init", "-q")
	write("lib.go", "package lib\n")
	write("internal/bench/main.go", "package main\n")
	write("BENCHMARKS.md", "# Benchmarks\n")
	git("add", ".")
	git("commit", "-q", "-m", "first")
	t.Chdir(filepath.Join(dir, "internal", "bench"))
	write("BENCHMARKS.md", "# Benchmarks again\n")
	if commit, clean := sourceCommit(); commit == "" || !clean {
		t.Fatalf("a checkout with only the report changed: %q, clean %v", commit, clean)
	}
	write("lib.go", "package lib // changed\n")
	if _, clean := sourceCommit(); clean {
		t.Error("a change outside the bench's directory is not seen")
	}
}

// TestNewRunKeepsUnfinishedResults keeps aside the saved results of an
// unfinished run that -resume cannot continue (here another commit), as a
// new run saves over results.json at its first sample.
func TestNewRunKeepsUnfinishedResults(t *testing.T) {
	dir := t.TempDir()
	old := &results{Commit: "abc", Started: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Groups: []groupRun{{Size: "1 GiB", Group: groupBackup, Rounds: 5}}}
	if err := old.save(filepath.Join(dir, "results.json")); err != nil {
		t.Fatal(err)
	}
	b := &bench{}
	if err := b.startResults(&config{work: dir, resume: true}); err != nil {
		t.Fatal(err)
	}
	if len(b.res.Groups) != 0 {
		t.Fatalf("another commit's run is continued: %+v", b.res.Groups)
	}
	kept, _ := filepath.Glob(filepath.Join(dir, "results-*.json"))
	if len(kept) != 1 {
		t.Fatalf("the unfinished run's results are not kept aside: %v", kept)
	}
	r, err := loadResults(kept[0])
	if err != nil || len(r.Groups) != 1 || r.Commit != "abc" {
		t.Errorf("kept %+v, %v", r, err)
	}
}

// TestStepInEveryStep finds the section of each subcommand make bench
// runs after the groups, so that a resumed make bench skips it.
func TestStepInEveryStep(t *testing.T) {
	at := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	p := &pitrReport{Started: at.Add(time.Hour), Command: "make bench", Commit: "abc"}
	r := &results{Commit: "abc", Started: at, Continuous: p, PointRestore: p,
		ContinuousRemote: map[string]*pitrReport{"tls": p, "tls-100ms": p},
		Replication:      &replicationReport{Started: p.Started, Command: p.Command, Commit: p.Commit},
		Seed:             &seedReport{Started: p.Started, Command: p.Command, Commit: p.Commit}}
	steps := map[string]func(*results) (time.Time, string, string){
		"pitr": func(r *results) (time.Time, string, string) { return r.Continuous.step() },
		"pitr-remote": func(r *results) (time.Time, string, string) {
			return remoteStep(r.ContinuousRemote, []string{"tls", "tls-100ms"})
		},
		"pitr-restore": func(r *results) (time.Time, string, string) { return r.PointRestore.step() },
		"replicate":    func(r *results) (time.Time, string, string) { return r.Replication.step() },
		"seed":         func(r *results) (time.Time, string, string) { return r.Seed.step() },
	}
	for name, get := range steps {
		if !stepIn(r, "abc", "make bench", get) {
			t.Errorf("%s: the same run's step is measured again", name)
		}
		if stepIn(&results{Commit: "abc", Started: at}, "abc", "make bench", get) {
			t.Errorf("%s: skipped without its section", name)
		}
	}
	if stepIn(r, "abc", "make bench", func(r *results) (time.Time, string, string) {
		return remoteStep(r.ContinuousRemote, []string{"tls", "tls-50ms"})
	}) {
		t.Error("pitr-remote skipped with a store missing")
	}
	if got := stepCommit(r, r.Seed.step); got != "" {
		t.Errorf("a section of the tables' commit says %q", got)
	}
	r.Seed.Commit = ""
	if got := stepCommit(r, r.Seed.step); !strings.Contains(got, "not recorded") {
		t.Errorf("a section measured with changes says %q", got)
	}
}
