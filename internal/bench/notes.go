//go:build !benchlean

package main

import (
	"cmp"
	_ "embed"
	"fmt"
	"strings"
	"text/template"
	"time"
)

// notesText is the reading of the figures appended to every report: a
// text/template that explains causes in words and quotes figures only
// through the functions of notesFuncs, which read them from the results
// being rendered. A figure the run did not measure renders as notAvailable.
//
//go:embed notes.md
var notesText string

// Marks around every figure the notes' functions write, when asked for
// (renderNotes with mark): a test strips what they enclose and finds no
// digit left, so no figure is typed into notes.md.
const (
	markOpen  = "\x02"
	markClose = "\x03"
)

// notAvailable is what a figure the run did not measure renders as.
const notAvailable = "(not measured)"

// renderNotes renders notesText on r; mark encloses every figure in
// markOpen and markClose.
func renderNotes(r *results, mark bool) (string, error) {
	t, err := template.New("notes.md").Option("missingkey=error").Funcs(notesFuncs(r, mark)).Parse(notesText)
	if err != nil {
		return "", fmt.Errorf("parse notes: %w", err)
	}
	var b strings.Builder
	if err := t.Execute(&b, nil); err != nil {
		return "", fmt.Errorf("render notes: %w", err)
	}
	return b.String(), nil
}

// notesFuncs returns the template functions of the notes, each a figure
// of r (none is a constant of the code: the targets' bounds are the
// Targets table's). Sizes are named "small" and "large" (targetSizes), or
// by their label; modes by name.
func notesFuncs(r *results, mark bool) template.FuncMap {
	small, large := targetSizes(r)
	rows := map[string]map[string]row{}
	get := func(size, mode string) (row, bool) {
		switch size {
		case "small":
			size = small
		case "large":
			size = large
		}
		m, ok := rows[size]
		if !ok {
			m = r.byMode(size)
			rows[size] = m
		}
		rw, ok := m[mode]
		return rw, ok
	}
	out := func(s string) string {
		if mark && s != notAvailable {
			return markOpen + s + markClose
		}
		return s
	}
	// fig makes a function of a size and a mode from a format and the
	// value of a row; ok false renders notAvailable.
	fig := func(format string, value func(row) (float64, bool)) func(string, string) string {
		return func(size, mode string) string {
			rw, ok := get(size, mode)
			if !ok {
				return notAvailable
			}
			v, ok := value(rw)
			if !ok {
				return notAvailable
			}
			return out(fmt.Sprintf(format, v))
		}
	}
	mib := func(v int64) (float64, bool) { return float64(v) / (1 << 20), v > 0 }
	return template.FuncMap{
		"small": func() string { return out(small) },
		"large": func() string { return out(large) },
		"cpus":  func() string { return out(fmt.Sprint(r.Machine.CPUs)) },
		"wall":  fig("%.2f s", func(rw row) (float64, bool) { return rw.Wall, rw.Wall > 0 }),
		"rss":   fig("%.0f MiB", func(rw row) (float64, bool) { return mib(rw.PeakRSS) }),
		"rssMax": fig("%.0f MiB", func(rw row) (float64, bool) {
			return mib(rw.PeakRSSMax)
		}),
		"anon": fig("%.0f MiB", func(rw row) (float64, bool) { return mib(rw.PeakAnon) }),
		// mibps is a copy's throughput: the stored object over the wall.
		"mibps": fig("%.0f MiB/s", func(rw row) (float64, bool) {
			return float64(rw.Stored) / (1 << 20) / rw.Wall, rw.Wall > 0 && rw.Stored > 0
		}),
		"cpu":     fig("%.1f s", func(rw row) (float64, bool) { return rw.CPU, rw.Runs > 0 }),
		"etcdCPU": fig("%.1f s", func(rw row) (float64, bool) { return rw.EtcdCPU, rw.Runs > 0 }),
		"minioCPU": fig("%.1f s", func(rw row) (float64, bool) {
			return rw.MinCPU, rw.Runs > 0
		}),
		"storedRaw": fig("%.3f", func(rw row) (float64, bool) {
			return float64(rw.Stored) / float64(rw.Raw), rw.Raw > 0 && rw.Stored > 0
		}),
		"shrinks": fig("%.1fx", func(rw row) (float64, bool) {
			return float64(rw.Raw) / float64(rw.Stored), rw.Raw > 0 && rw.Stored > 0
		}),
		// vs is the ratio of the medians of two modes on one size.
		"vs": func(size, mode, against string) string {
			a, ok1 := get(size, mode)
			b, ok2 := get(size, against)
			if !ok1 || !ok2 || a.Wall == 0 || b.Wall == 0 {
				return notAvailable
			}
			return out(fmt.Sprintf("%.2f", a.Wall/b.Wall))
		},
		// judged is a compared mode's wall time against its group's
		// baseline as the Targets judge it: over the quiet rounds, the
		// median of the paired ratios and the ratio of the medians.
		"judged": func(size, mode string) string {
			rw, ok := get(size, mode)
			if !ok || rw.Judged.Quiet == 0 {
				return notAvailable
			}
			f := rw.Judged
			return out(fmt.Sprintf("%.2f", f.Paired)) + " paired, " + out(fmt.Sprintf("%.2f", f.OfMedians)) + " as a ratio of medians (" + out(fmt.Sprint(f.Quiet)) + " quiet rounds)"
		},
		"followerRSS": func() string {
			return pitrFig(r.Continuous, out, func(p *pitrReport) string { return formatBytes(p.HWM) })
		},
		"replayRate": func() string {
			return pitrFig(r.Continuous, out, func(p *pitrReport) string {
				if p.Replay <= 0 {
					return ""
				}
				return fmt.Sprintf("%.0f events/s", rate(p.Events, p.Replay))
			})
		},
		"followerChainRSS": func() string {
			return pitrFig(r.Continuous, out, func(p *pitrReport) string {
				if p.ChainHWM <= 0 {
					return ""
				}
				return formatBytes(p.ChainHWM)
			})
		},
		"lagP50": func() string {
			return pitrFig(r.Continuous, out, func(p *pitrReport) string { return p.LagP50.Round(time.Millisecond).String() })
		},
		"lagP99": func() string {
			return pitrFig(r.Continuous, out, func(p *pitrReport) string { return p.LagP99.Round(time.Millisecond).String() })
		},
		"pointRestore": func() string {
			return pitrFig(r.PointRestore, out, func(p *pitrReport) string { return p.PointTotal.Round(time.Millisecond).String() })
		},
		"fullRestore": func() string {
			return pitrFig(r.PointRestore, out, func(p *pitrReport) string { return p.FullOnly.Round(time.Millisecond).String() })
		},
		"pointReplay": func() string {
			return pitrFig(r.PointRestore, out, func(p *pitrReport) string { return p.Replay.Round(time.Millisecond).String() })
		},
		"compactRate": func() string {
			return compactFig(r.PointRestore, out, func(c *compactReport) string {
				return fmt.Sprintf("%.0f events/s", rate(c.Events, c.Elapsed))
			})
		},
		"compactRSS": func() string {
			return compactFig(r.PointRestore, out, func(c *compactReport) string { return formatBytes(c.HWM) })
		},
		"compactedRestore": func() string {
			return compactFig(r.PointRestore, out, func(c *compactReport) string { return c.Restore.Round(time.Millisecond).String() })
		},
		"compactedVsFull": func() string {
			return compactFig(r.PointRestore, out, func(c *compactReport) string {
				if len(c.Rounds) > 0 {
					f := judgeWall(c.Rounds)
					if f.Quiet == 0 {
						return ""
					}
					return fmt.Sprintf("%.2fx (paired median; ratio of medians %.2fx)", f.Paired, f.OfMedians)
				}
				if r.PointRestore.FullOnly <= 0 {
					return ""
				}
				return fmt.Sprintf("%.2fx in one run", c.Restore.Seconds()/r.PointRestore.FullOnly.Seconds())
			})
		},
		"compactedTarget": func() string { return out(fmt.Sprintf("%.1fx", compactedRestoreTarget)) },
		"continuousFull": func() string {
			return pitrFig(r.Continuous, out, func(p *pitrReport) string { return cmp.Or(p.Full, "empty") })
		},
	}
}

// compactFig formats a figure of p's compaction, notAvailable without it.
func compactFig(p *pitrReport, out func(string) string, f func(*compactReport) string) string {
	if p == nil || p.Compaction == nil {
		return notAvailable
	}
	return pitrFig(p, out, func(p *pitrReport) string { return f(p.Compaction) })
}

// pitrFig formats a figure of p, notAvailable without p.
func pitrFig(p *pitrReport, out func(string) string, f func(*pitrReport) string) string {
	if p == nil {
		return notAvailable
	}
	s := f(p)
	if s == "" {
		return notAvailable
	}
	return out(s)
}
