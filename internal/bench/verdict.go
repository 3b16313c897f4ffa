//go:build !benchlean

package main

import (
	"fmt"
	"slices"
)

// minQuietRounds is how many quiet rounds a wall-time verdict needs: with
// fewer, the verdict is "unclear". Other people's load slows the modes of
// a round unequally, so only quiet rounds are judged.
const minQuietRounds = 5

// pair is one run of a mode and the run of its group's baseline next to
// it in the same round.
type pair struct {
	Wall, Base float64
	// Quiet is true when other processes used less than quietCores
	// during both runs.
	Quiet bool
}

// wallFigure is a mode's wall time against its baseline's over the quiet
// pairs: the median of the paired ratios and the ratio of the medians,
// which judge the same runs two ways.
type wallFigure struct {
	// Paired is the median of wall/base over the quiet pairs; Min and
	// Max bound them.
	Paired, Min, Max float64
	// OfMedians is median(wall) / median(base) over the quiet pairs.
	OfMedians float64
	// Quiet counts the quiet pairs, Rounds every pair.
	Quiet, Rounds int
}

// judgeWall computes the wall-time figure of pairs.
func judgeWall(pairs []pair) wallFigure {
	f := wallFigure{Rounds: len(pairs)}
	var ratios, walls, bases []float64
	for _, p := range pairs {
		if !p.Quiet || p.Base <= 0 || p.Wall <= 0 {
			continue
		}
		ratios = append(ratios, p.Wall/p.Base)
		walls = append(walls, p.Wall)
		bases = append(bases, p.Base)
	}
	f.Quiet = len(ratios)
	if f.Quiet == 0 {
		return f
	}
	f.Paired, f.Min, f.Max = median(ratios), slices.Min(ratios), slices.Max(ratios)
	f.OfMedians = median(walls) / median(bases)
	return f
}

// verdictAtMost says whether f meets a bound on the ratio: "met" only
// when there are at least minQuietRounds quiet pairs and both statistics
// are within the bound, "**missed**" when both are above it, and
// "unclear" with the reason otherwise.
func (f wallFigure) verdictAtMost(bound float64) string {
	if f.Quiet < minQuietRounds {
		return fmt.Sprintf("unclear: %d quiet rounds of %d needed", f.Quiet, minQuietRounds)
	}
	a, b := f.Paired <= bound, f.OfMedians <= bound
	switch {
	case a && b:
		return "met"
	case !a && !b:
		return verdict(false)
	}
	return "unclear: the paired median and the ratio of medians disagree"
}

// String writes the figure for a targets table.
func (f wallFigure) String() string {
	if f.Quiet == 0 {
		return fmt.Sprintf("no quiet round of %d", f.Rounds)
	}
	return fmt.Sprintf("paired median **%.2f** (%.2f–%.2f), ratio of medians **%.2f**; %d quiet rounds of %d", f.Paired, f.Min, f.Max, f.OfMedians, f.Quiet, f.Rounds)
}

// verdict says whether a target was met.
func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}
