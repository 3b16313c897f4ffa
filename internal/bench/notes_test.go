//go:build !benchlean

package main

import (
	"encoding/json"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

var updateFixture = flag.Bool("update", false, "write testdata/results.json again")

const fixturePath = "testdata/results.json"

// fixtureCommit is the commit the fixture's tables and sections record.
const fixtureCommit = "0123456789abcdef0123456789abcdef01234567"

// fixtureResults builds the results of testdata/results.json: every mode
// on a 256 MiB etcd once and on a 1 GiB etcd once, then four more rounds
// of a few, in the order the bench runs them, and the section of every
// other step of make bench. The figures
// are made up, and distinct enough to be told apart in the report.
func fixtureResults() *results {
	rng := rand.New(rand.NewPCG(38, 1))
	r := &results{
		Machine: machine{CPUs: 2, CPUModel: "fixture", MemoryBytes: 8 << 30, GoVersion: "go1.26", OS: "linux/amd64", EtcdVersion: "3.7.3", MinIO: "fixture", Library: "fixture"},
		Started: time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC), Finished: time.Date(2026, 11, 27, 2, 0, 0, 0, time.UTC),
		Command: "make bench", Commit: fixtureCommit,
	}
	for _, m := range modes {
		r.Modes = append(r.Modes, modeInfo{Name: m.name, Label: m.label, Short: m.short, Group: m.group, Reference: m.reference, Source: m.source})
	}
	for _, sz := range []struct {
		label  string
		target int64
		rounds int
	}{{"256 MiB", 256 << 20, 1}, {"1 GiB", 1 << 30, 5}} {
		raw := sz.target + 4096
		r.Sizes = append(r.Sizes, sizeInfo{Label: sz.label, Target: sz.target, DBSize: raw, DBSizeInUse: raw, Keys: sz.target >> 13, KVBytes: sz.target * 4 / 5, Raw: raw, FillSeconds: 40, Cached: true, Runs: sz.rounds, RestoreRuns: sz.rounds})
		scale := float64(sz.target) / (1 << 30)
		for run := 1; run <= sz.rounds; run++ {
			// After the first round, only the modes of two judged
			// targets run, to keep the fixture small.
			ms := modes
			if run > 1 {
				ms = slices.DeleteFunc(slices.Clone(modes), func(m mode) bool {
					return !slices.Contains([]string{"two-step", "stream", "stream-zstd", "download-restore", "restore"}, m.name)
				})
			}
			for _, g := range groupModes(ms) {
				for i, m := range roundOrder(g, run) {
					wall := (4 + 8*rng.Float64()) * scale
					if m.name == "idle" || m.name == "cli-idle" {
						wall = 0
					}
					stored := raw
					if strings.Contains(m.name, "zstd") || strings.Contains(m.name, "export") {
						stored = raw * int64(20+rng.IntN(5)) / 100
					}
					r.Samples = append(r.Samples, sample{
						Size: sz.label, Mode: m.name, Run: run, Seq: i + 1, Wall: round2(wall),
						PeakRSS: int64(20+rng.IntN(100)) << 20, PeakAnon: int64(5+rng.IntN(40)) << 20,
						Raw: raw, Stored: stored, CPU: round2(wall * 0.7), EtcdCPU: round2(wall * 0.4), MinIOCPU: round2(wall * 0.3),
						OtherCores: round2(0.2 * rng.Float64()),
					})
				}
			}
		}
	}
	r.Continuous = &pitrReport{Started: r.Started, Command: "make bench", Commit: fixtureCommit, Full: "1 GiB", Keys: 131072, Asked: 1000, Writes: 60000, Seconds: 60, Rate: 998.7, Value: 1024, Segments: 57,
		HWM: 91 << 20, ChainHWM: 83 << 20, LagP50: 577 * time.Millisecond, LagP99: 1123 * time.Millisecond, LagMax: 1201 * time.Millisecond,
		Events: 60000, Replay: 251 * time.Millisecond, PointTotal: 2417 * time.Millisecond, FullOnly: 2166 * time.Millisecond, FullRevision: 131073, RestoredRevision: 191073,
		Compaction: &compactReport{Events: 60000, Segments: 57, Revision: 191073, Elapsed: 4211 * time.Millisecond, Replay: 389 * time.Millisecond, HWM: 173 << 20, StoredBytes: 301 << 20, Restore: 2207 * time.Millisecond}}
	r.PointRestore = &pitrReport{Started: r.Started, Command: "make bench", Commit: fixtureCommit, Full: "1 GiB", Keys: 131072, Writes: 100000, Value: 1024, Segments: 13,
		Events: 100000, Replay: 611 * time.Millisecond, PointTotal: 3911 * time.Millisecond, FullOnly: 2301 * time.Millisecond, FullRevision: 131073, RestoredRevision: 231073,
		Compaction: &compactReport{Events: 100000, Segments: 13, Revision: 231073, Elapsed: 7013 * time.Millisecond, Replay: 677 * time.Millisecond, HWM: 181 << 20, StoredBytes: 305 << 20, Restore: 2389 * time.Millisecond,
			Rounds: []pair{{Wall: 2.389, Base: 2.301, Quiet: true}, {Wall: 2.41, Base: 2.25, Quiet: true}, {Wall: 2.35, Base: 2.4, Quiet: true},
				{Wall: 2.5, Base: 2.3, Quiet: true}, {Wall: 2.2, Base: 2.2, Quiet: true}, {Wall: 4.1, Base: 2.1}}}}
	r.ContinuousRemote = map[string]*pitrReport{"tls-100ms": {Started: r.Started, Command: "make bench", Commit: fixtureCommit, Full: "256 MiB", Asked: 1000, Writes: 20000, Seconds: 20, Rate: 997.1, Value: 1024, Segments: 19,
		HWM: 83 << 20, LagP50: 913 * time.Millisecond, LagP99: 1712 * time.Millisecond, LagMax: 1811 * time.Millisecond}}
	r.Replication = &replicationReport{Started: r.Started, Command: "make bench", Commit: fixtureCommit, Asked: 1000, Writes: 60000, Value: 1024, Seconds: 60, Interval: time.Second,
		Segments: 58, Copied: 58, Rounds: 61, LagP50: 533 * time.Millisecond, LagP99: 1017 * time.Millisecond, LagMax: 1093 * time.Millisecond,
		WriteLagP99: 2011 * time.Millisecond, HWM: 37 << 20, RSSHalf: 33 << 20, RSSEnd: 34 << 20}
	r.Seed = &seedReport{Started: r.Started, Command: "make bench", Commit: fixtureCommit, Jobs: 1000, Etcds: 10, Writes: 10, Slots: 4, GOMAXPROCS: 2, Destination: "file", Load: 0.4,
		Base: 21 << 20, StartupPeak: 701 << 20, AllFollowing: 97 * time.Second, FirstCommits: 131 * time.Second, Timeout: 30 * time.Minute,
		SteadyPeak: 613 << 20, SteadyEnd: 597 << 20, SteadyHeap: 311 << 20, Goroutines: 23011, Phase: 2 * time.Minute,
		Segments: 119000, LagP50: 1103 * time.Millisecond, LagP99: 1907 * time.Millisecond, LagMax: 2707 * time.Millisecond, CPU: 131, StartCPU: 211, Fulls: 1000, MaxFulls: 4}
	r.Recovery = &recoveryReport{Started: r.Started, Command: "make bench", Commit: fixtureCommit, Full: "1 GiB", Keys: 131072, Rate: 2000, Value: 1024, StartHead: 431073, Behind: 300000,
		Protected: 41 * time.Second, LagUnder2s: 97 * time.Second, TailDone: 173 * time.Second, FullRevision: 433101,
		Lags: []lagSample{{At: time.Second, Revisions: 300000, Lag: 61 * time.Second, Tail: 300000}, {At: 97 * time.Second, Revisions: 1900, Lag: 1900 * time.Millisecond, Tail: 7000}}}
	return r
}

func round2(f float64) float64 { return float64(int(f*100+0.5)) / 100 }

func loadFixture(t *testing.T) *results {
	t.Helper()
	if *updateFixture {
		b, err := json.Marshal(fixtureResults())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(fixturePath, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := loadResults(fixturePath)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// identifier is a word that begins with a letter, digits within it
// included (SHA-256, X25519, CRC32C): not a figure.
var identifier = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*(-[0-9]+)?`)

// TestNotesFiguresFromResults renders the notes from a fixed results.json
// and fails on any digit the notes' functions did not write from it: a
// figure typed into notes.md.
func TestNotesFiguresFromResults(t *testing.T) {
	r := loadFixture(t)
	marked, err := renderNotes(r, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range typedFigures(marked) {
		t.Errorf("a figure is typed into the notes, not read from the results: %q", line)
	}
	if n := strings.Count(marked, markOpen); n < 40 {
		t.Errorf("the notes quote %d figures from the results, want the figures they explain (at least 40)", n)
	}
	plain, err := renderNotes(r, false)
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(plain, markOpen+markClose) {
		t.Error("unmarked notes hold marks")
	}
	if strings.Contains(plain, notAvailable) {
		t.Errorf("the notes lack a figure the fixture holds:\n%s", plain)
	}
	// A figure comes from the results: it changes with them.
	for i := range r.Samples {
		r.Samples[i].PeakRSS += 1 << 30
	}
	r.Continuous.LagP99 += time.Second
	moved, err := renderNotes(r, true)
	if err != nil {
		t.Fatal(err)
	}
	if moved == marked {
		t.Error("the notes did not change with the results")
	}
}

// typedFigures returns the lines of notes that hold a digit outside the
// figure marks and outside identifiers, and a line for unbalanced marks.
func typedFigures(notes string) []string {
	var rest strings.Builder
	var bad []string
	for i, part := range strings.Split(notes, markOpen) {
		if i > 0 {
			j := strings.Index(part, markClose)
			if j < 0 {
				bad = append(bad, "unbalanced figure marks near "+part)
				continue
			}
			rest.WriteString(" ")
			part = part[j+len(markClose):]
		}
		if strings.Contains(part, markClose) {
			bad = append(bad, "unbalanced figure marks near "+part)
		}
		rest.WriteString(part)
	}
	for line := range strings.SplitSeq(rest.String(), "\n") {
		if words := identifier.ReplaceAllString(line, ""); strings.ContainsAny(words, "0123456789") {
			bad = append(bad, line)
		}
	}
	return bad
}

// TestTypedFigures holds the check to what it must catch.
func TestTypedFigures(t *testing.T) {
	for _, tc := range []struct {
		notes string
		typed bool
	}{
		{"SHA-256, X25519 and CRC32C cost " + markOpen + "1.2 s" + markClose + ".", false},
		{"(g) takes 0.8 of (f)'s time", true},
		{"peaks at " + markOpen + "88 MiB" + markClose + ", 111-119 MiB before", true},
		{"ten paired rounds", false},
		{"half " + markOpen + "3 s", true},
	} {
		if got := len(typedFigures(tc.notes)) > 0; got != tc.typed {
			t.Errorf("%q: typed figure found %v, want %v", tc.notes, got, tc.typed)
		}
	}
}

// TestReportFromFixture renders the whole report from the fixture: the
// continuous-backup and logical sections come from the results, every
// size is judged, and a verdict on the fixture's five rounds is never met
// on one statistic alone.
func TestReportFromFixture(t *testing.T) {
	r := loadFixture(t)
	got, err := renderReport(r, "BENCHMARKS.png")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"## Logical backups", "| CLI export |", "| CLI import |",
		"## Continuous backup", "| follower peak RSS (VmHWM), its full backup included | 91 MiB | <= 64 MiB: **missed** |",
		"| commit lag p99 | 1.123s | <= 2s: met |",
		"### Restoring a point after many writes", "| of which the offline replay | 100000 events in 611ms:",
		"| restore of revision 231073 after compaction (the synthetic full alone), against the full backup alone restored next to it | median 2.389s, 0.61x the point restore before compaction; paired median **1.04** (0.98–1.09), ratio of medians **1.04**; 5 quiet rounds of 6 | <= 1.3x the full alone: met |",
		"| restore of revision 191073 after compaction (the synthetic full alone) | 2.207s: 0.91x the point restore before compaction, 1.02x the full alone (one run each) | — (one run: no verdict) |",
		"### etcd of 256 MiB", "### etcd of 1 GiB",
		"| peak RSS <= 48 MiB at the default --memory | CLI save |",
		"Copy of the backup (b) took of this etcd", "| (k) `etcdbackup copy --backup=ID` as shipped", "### Copy between destinations",
		"### Continuous backup to a remote store", "| 1000, 997 | 19 | 913ms | 1.712s | 1.811s | 83 MiB |",
		"## Replication", "| replication lag p99 | 1.017s |", "| replicator peak RSS (VmHWM) | 37 MiB | <= 64 MiB: met |",
		"### Seed scale: many continuous jobs in one process", "| start-up peak RSS (VmHWM) | 701 MiB", "| commit lag p99 | 1.907s |",
		"### Recovery after an outage", "| lag back under 2 s | 1m37s |",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("report lacks %q", w)
		}
	}
	if n := strings.Count(got, "| (k) `etcdbackup copy"); n != len(r.Sizes) {
		t.Errorf("the copy rows are in %d tables, want one table a size (%d)", n, len(r.Sizes))
	}
	for _, bad := range []string{"pitr.md", notAvailable, "Not measured by this run", "Measured at commit"} {
		if strings.Contains(got, bad) {
			t.Errorf("report holds %q", bad)
		}
	}
	if info, err := os.Stat(filepath.Clean(fixturePath)); err != nil || info.Size() > 40<<10 {
		t.Errorf("the fixture must stay under 40 KiB: %v, %v", info.Size(), err)
	}
}

// TestReportNotMeasured says of every step's section the fixture lacks
// that the run did not measure it.
func TestReportNotMeasured(t *testing.T) {
	r := loadFixture(t)
	r.Continuous, r.ContinuousRemote, r.PointRestore, r.Replication, r.Seed, r.Recovery = nil, nil, nil, nil, nil, nil
	got, err := renderReport(r, "BENCHMARKS.png")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"## Continuous backup", "### Continuous backup to a remote store", "### Restoring a point after many writes", "## Replication", "### Seed scale", "### Recovery after an outage"} {
		i := strings.Index(got, w)
		if i < 0 {
			t.Errorf("report lacks %q", w)
			continue
		}
		if !strings.Contains(got[i:min(len(got), i+len(w)+300)], "ot measured") {
			t.Errorf("section %q does not say it was not measured", w)
		}
	}
}
