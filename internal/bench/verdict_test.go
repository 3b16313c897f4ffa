//go:build !benchlean

package main

import (
	"slices"
	"strings"
	"testing"
)

// quietPairs makes quiet pairs of walls against bases.
func quietPairs(walls, bases []float64) []pair {
	var out []pair
	for i := range walls {
		out = append(out, pair{Wall: walls[i], Base: bases[i], Quiet: true})
	}
	return out
}

func TestJudgeWall(t *testing.T) {
	for _, tc := range []struct {
		name              string
		pairs             []pair
		paired, ofMedians float64
		quiet             int
		verdict           string
	}{
		{
			// Both statistics under 0.8: met.
			name:   "met",
			pairs:  quietPairs([]float64{7, 7, 7, 7, 7}, []float64{10, 10, 10, 10, 10}),
			paired: 0.7, ofMedians: 0.7, quiet: 5, verdict: "met",
		},
		{
			name:   "missed",
			pairs:  quietPairs([]float64{9, 9, 9, 9, 9}, []float64{10, 10, 10, 10, 10}),
			paired: 0.9, ofMedians: 0.9, quiet: 5, verdict: "**missed**",
		},
		{
			// The paired ratios are 0.5 0.5 0.5 1.2 1.3: median 0.5;
			// the medians are 20 and 20: 1.0. They disagree.
			name:   "disagree",
			pairs:  quietPairs([]float64{5, 10, 20, 24, 26}, []float64{10, 20, 40, 20, 20}),
			paired: 0.5, ofMedians: 1.0, quiet: 5, verdict: "unclear: the paired median and the ratio of medians disagree",
		},
		{
			// Four quiet rounds and a loud one: too few quiet rounds,
			// whatever the figures.
			name: "too few quiet rounds",
			pairs: append(quietPairs([]float64{7, 7, 7, 7}, []float64{10, 10, 10, 10}),
				pair{Wall: 1, Base: 10}),
			paired: 0.7, ofMedians: 0.7, quiet: 4, verdict: "unclear: 4 quiet rounds of 5 needed",
		},
		{
			name:    "none",
			verdict: "unclear: 0 quiet rounds of 5 needed",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := judgeWall(tc.pairs)
			if !near(f.Paired, tc.paired) || !near(f.OfMedians, tc.ofMedians) || f.Quiet != tc.quiet || f.Rounds != len(tc.pairs) {
				t.Errorf("judgeWall = %+v; want paired %v, ratio of medians %v, %d quiet of %d", f, tc.paired, tc.ofMedians, tc.quiet, len(tc.pairs))
			}
			if got := f.verdictAtMost(0.8); got != tc.verdict {
				t.Errorf("verdict %q, want %q", got, tc.verdict)
			}
		})
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// TestRoundOrder checks that every compared mode runs next to a run of
// the baseline in every round, on both sides over two rounds, and that
// summarize pairs each run with that neighbour.
func TestRoundOrder(t *testing.T) {
	g := []mode{{name: "ref1", reference: true}, {name: "base"}, {name: "m1"}, {name: "m2"}, {name: "m3"}, {name: "ref2", reference: true}}
	sides := map[string]map[string]bool{}
	for run := 1; run <= 2; run++ {
		order := roundOrder(g, run)
		var names []string
		for _, m := range order {
			names = append(names, m.name)
		}
		if len(order) != 7 || !slices.Contains(names, "m3") {
			t.Fatalf("round %d: %v, want every mode once and the baseline twice", run, names)
		}
		for i, m := range order {
			if m.reference || m.name == "base" {
				continue
			}
			before := i > 0 && order[i-1].name == "base"
			after := i+1 < len(order) && order[i+1].name == "base"
			if !before && !after {
				t.Errorf("round %d: %s is not next to the baseline: %v", run, m.name, names)
			}
			if sides[m.name] == nil {
				sides[m.name] = map[string]bool{}
			}
			sides[m.name][map[bool]string{true: "after base", false: "before base"}[before]] = true
		}
		if strings.Join(names[len(names)-2:], " ") != map[int]string{1: "ref1 ref2", 2: "ref2 ref1"}[run] {
			t.Errorf("round %d: references do not come last, rotated: %v", run, names)
		}
	}
	if len(sides["m1"]) != 2 || len(sides["m2"]) != 2 {
		t.Errorf("modes stay on one side of the baseline: %v", sides)
	}

	// Runs m1 base m2 m3 base: m2 pairs with the base run before it
	// (seq 2), m3 with the one after it (seq 5).
	r := &results{Modes: []modeInfo{{Name: "base", Group: "backup"}, {Name: "m1", Group: "backup"}, {Name: "m2", Group: "backup"}, {Name: "m3", Group: "backup"}}}
	for i, s := range []struct {
		mode string
		wall float64
	}{{"m1", 4}, {"base", 10}, {"m2", 6}, {"m3", 3}, {"base", 20}} {
		r.Samples = append(r.Samples, sample{Size: "s", Mode: s.mode, Run: 1, Seq: i + 1, Wall: s.wall})
	}
	rows := r.byMode("s")
	for name, want := range map[string]float64{"m1": 0.4, "m2": 0.6, "m3": 0.15} {
		if got := rows[name].Paired; !near(got, want) {
			t.Errorf("%s paired %v, want %v", name, got, want)
		}
	}
	if len(rows["base"].Pairs) != 0 {
		t.Errorf("the baseline is paired with itself: %v", rows["base"].Pairs)
	}
}

// TestNeedsQuietRounds checks that rounds are added while a compared mode
// has fewer than minQuietRounds quiet rounds, whatever the baseline and
// the references have.
func TestNeedsQuietRounds(t *testing.T) {
	g := []mode{{name: "ref", group: "backup", reference: true}, {name: "base", group: "backup"}, {name: "m", group: "backup"}}
	b := &bench{res: &results{Modes: []modeInfo{{Name: "ref", Group: "backup", Reference: true}, {Name: "base", Group: "backup"}, {Name: "m", Group: "backup"}}}}
	add := func(run int, others float64) {
		for i, m := range roundOrder(g, run) {
			b.res.Samples = append(b.res.Samples, sample{Size: "s", Mode: m.name, Run: run, Seq: i + 1, Wall: 1, OtherCores: others})
		}
	}
	for run := 1; run <= 4; run++ {
		add(run, 0)
	}
	add(5, 1) // a loud round
	if !b.needsQuietRounds("s", g) {
		t.Error("4 quiet rounds of 5 are enough")
	}
	add(6, 0)
	if b.needsQuietRounds("s", g) {
		t.Error("5 quiet rounds are not enough")
	}
	// A group no verdict rests on gets no added rounds.
	remote := []mode{{name: "base-r", group: "backup-tls"}, {name: "m-r", group: "backup-tls"}}
	b.res.Modes = append(b.res.Modes, modeInfo{Name: "base-r", Group: "backup-tls"}, modeInfo{Name: "m-r", Group: "backup-tls"})
	b.res.Samples = append(b.res.Samples, sample{Size: "s", Mode: "base-r", Run: 1, Seq: 1, Wall: 1, OtherCores: 1}, sample{Size: "s", Mode: "m-r", Run: 1, Seq: 2, Wall: 1, OtherCores: 1})
	if b.needsQuietRounds("s", remote) {
		t.Error("rounds are added to a group no verdict rests on")
	}
}

// TestRoundModes drops the references after -ref-runs rounds and keeps
// the other modes' places, so that pairs stay adjacent.
func TestRoundModes(t *testing.T) {
	g := []mode{{name: "ref1", reference: true}, {name: "base"}, {name: "m1"}, {name: "m2"}, {name: "ref2", reference: true}}
	names := func(ms []mode) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.name)
		}
		return out
	}
	if got := roundModes(g, 3, 3); !slices.Equal(names(got), names(roundOrder(g, 3))) {
		t.Errorf("round 3 of 3: %v, want every mode %v", names(got), names(roundOrder(g, 3)))
	}
	got, all := roundModes(g, 4, 3), roundOrder(g, 4)
	if slices.ContainsFunc(got, func(m mode) bool { return m.reference }) {
		t.Errorf("round 4 of 3 runs references: %v", names(got))
	}
	if !slices.Equal(names(got), names(all[:len(got)])) {
		t.Errorf("round 4: %v is not the start of %v", names(got), names(all))
	}
}
