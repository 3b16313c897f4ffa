//go:build !benchlean

package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// rssTarget is the bound on the backup process' peak RSS.
const rssTarget = 128 << 20

// writeChart draws median wall time and peak RSS against the snapshot size,
// one line per mode, side by side, as a PNG.
func writeChart(r *results, path string) error {
	wall := plot.New()
	wall.Title.Text = "Wall time (median)"
	wall.X.Label.Text = "etcd snapshot size (MiB)"
	wall.Y.Label.Text = "seconds"
	rss := plot.New()
	rss.Title.Text = "Peak RSS of the backup process (median)"
	rss.X.Label.Text = "etcd snapshot size (MiB)"
	rss.Y.Label.Text = "MiB"
	// Ticks at the sizes measured, so each point reads as one etcd.
	ticks := []plot.Tick{{Value: 0, Label: "0"}}
	for _, sz := range r.Sizes {
		ticks = append(ticks, plot.Tick{Value: float64(sz.Raw) / (1 << 20), Label: fmt.Sprintf("%.0f", float64(sz.Raw)/(1<<20))})
	}
	for _, p := range []*plot.Plot{wall, rss} {
		p.Add(plotter.NewGrid())
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.TextStyle.Font.Size = vg.Points(12)
		p.Legend.Padding = vg.Points(2)
		p.Title.TextStyle.Font.Size = vg.Points(15)
		for _, a := range []*plot.Axis{&p.X, &p.Y} {
			a.Label.TextStyle.Font.Size = vg.Points(13)
			a.Tick.Label.Font.Size = vg.Points(12)
		}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		p.Y.Tick.Marker = roundTicks{}
		p.X.Min, p.Y.Min = 0, 0
	}
	maxRSS := 0.0

	for i, m := range r.Modes {
		if m.Group != groupBackup {
			continue // the chart shows backups
		}
		var wxy, rxy plotter.XYs
		for _, sz := range r.Sizes {
			for _, rw := range r.summarize(sz.Label) {
				if rw.Mode.Name != m.Name {
					continue
				}
				x := float64(sz.Raw) / (1 << 20)
				if rw.Wall > 0 {
					wxy = append(wxy, plotter.XY{X: x, Y: rw.Wall})
				}
				rxy = append(rxy, plotter.XY{X: x, Y: float64(rw.PeakRSS) / (1 << 20)})
				maxRSS = max(maxRSS, float64(rw.PeakRSS)/(1<<20))
			}
		}
		for _, s := range []struct {
			p   *plot.Plot
			xys plotter.XYs
		}{{wall, wxy}, {rss, rxy}} {
			if len(s.xys) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(s.xys)
			if err != nil {
				return fmt.Errorf("chart: %w", err)
			}
			c := modeColor(r.Modes, i)
			line.Color, points.Color = c, c
			line.Width = vg.Points(1.5)
			points.Shape = plotutil.Shape(i)
			points.Radius = vg.Points(3)
			if m.Reference {
				line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			s.p.Add(line, points)
			// One legend serves both plots: same mode, same colour.
			if s.p == wall || m.Name == "idle" {
				s.p.Legend.Add(shortLabel(m), line, points)
			}
		}
	}
	// The target: a flat red line across the sizes measured.
	if len(r.Sizes) > 0 {
		maxX := float64(r.Sizes[len(r.Sizes)-1].Raw) / (1 << 20)
		target, err := plotter.NewLine(plotter.XYs{{X: 0, Y: rssTarget >> 20}, {X: maxX, Y: rssTarget >> 20}})
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		target.Color = color.RGBA{R: 200, A: 255}
		target.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		rss.Add(target)
		rss.Legend.Add("target: 128 MiB", target)
		// Room above the target line for the legend.
		rss.Y.Max = max(maxRSS*1.1, 1.45*(rssTarget>>20))
	}

	img := vgimg.NewWith(vgimg.UseWH(14*vg.Inch, 6*vg.Inch), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Inch / 3, PadTop: vg.Inch / 6, PadBottom: vg.Inch / 6, PadLeft: vg.Inch / 6, PadRight: vg.Inch / 6}
	canvases := plot.Align([][]*plot.Plot{{wall, rss}}, tiles, dc)
	wall.Draw(canvases[0][0])
	rss.Draw(canvases[0][1])

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("chart: %w", err)
	}
	return f.Close()
}

// roundTicks labels an axis at steps of 1, 2 or 5 times a power of ten,
// five to ten of them, with no needless decimals: the default marker labels
// only two values of a seconds axis, as "0.00" and "25.00".
type roundTicks struct{}

// Ticks implements plot.Ticker.
func (roundTicks) Ticks(lo, hi float64) []plot.Tick {
	if hi <= lo {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'f', -1, 64)}}
	}
	step := math.Pow(10, math.Floor(math.Log10((hi-lo)/5)))
	for _, m := range []float64{1, 2, 5, 10} {
		if (hi-lo)/(m*step) <= 10 {
			step *= m
			break
		}
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step/1e6; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(math.Round(v*1e6)/1e6, 'f', -1, 64)})
	}
	return ticks
}

// modeColor gives the baseline black, reference modes grey and the others
// the palette's colours, so the reference lines never pass for modes.
func modeColor(modes []modeInfo, i int) color.Color {
	switch {
	case modes[i].Reference && modes[i].Name == "idle":
		return color.Gray{Y: 170}
	case modes[i].Reference:
		return color.Gray{Y: 110}
	case i == 0:
		return color.Black
	}
	return plotutil.Color(i - 1)
}

// shortLabel is a mode's label cut to its letter and first words, for
// legends.
func shortLabel(m modeInfo) string {
	if m.Short != "" {
		return m.Short
	}
	return m.Name
}
